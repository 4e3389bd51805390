"""`toolref.Transport`: which requests go through the manager, the offer of edits, and edits
once the receiver says it reads them (against the in-memory registry of `edits.oracle`).

Which requests: a POST to an LLM endpoint (`toolref.wire.endpoints`) whose body is plain
JSON, from a caller that does not speak toolref itself; everything else passes through as
it came, no header added. A request is sent as it is with `Toolref-Edits: 2` until an
answer carries `Toolref-Edits`; then as an edit, whatever bytes the body holds (a lone
surrogate escape, a number no double holds: they are cut, not parsed). The messages here
are long enough to be worth an edit (a tiny first body goes as it came:
tests/integration/test_sdk_small_bodies.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.unit.edits.oracle import Registry
from toolref.edits.wire import MEDIA_TYPE
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.sending.answers import may_resend
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.transport import Transport

JSON = {"content-type": "application/json"}


def body(**members: Any) -> bytes:
    return json.dumps({"model": "m", **members}).encode()


MESSAGES = [{"role": "user", "content": "What does the parser do with a trailing comma?"}]
# Valid JSON a JSON library cannot write back, each of which providers accept.
UNCARRIABLE = {
    # What JSON.stringify writes for a string cut inside an emoji.
    "lone-surrogate": b'{"model":"m","messages":[{"role":"user","content":"a question '
    b'that JSON.stringify cut \\ud83d"}]}',
    "past-a-double": b'{"model":"m","messages":[{"role":"user","content":"What does the '
    b'parser do with this seed?"}],"seed":1e400}',
    "past-int-digits": b'{"model":"m","messages":[],"n":' + b"9" * 5000 + b"}",
}


class Receiver:
    """A receiver that reads edits (restored by the oracle registry) once offered them, or
    one that does not speak toolref (`speaks`: False); it records what it was sent."""

    def __init__(self, speaks: bool = True) -> None:
        self.speaks = speaks
        self.registry = Registry()
        self.sent: list[httpx.Request] = []
        self.bodies: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        content = request.read()
        headers = {"content-type": "application/json"}
        if request.headers.get("content-type") == MEDIA_TYPE:
            secrets = [(k, v) for k, v in request.headers.items() if k == "authorization"]
            answer = self.registry.answer(content, secrets)
            if answer.status != 200:
                return httpx.Response(answer.status, json=answer.problem)
            assert answer.body is not None
            assert answer.history is not None
            self.bodies.append(answer.body)
            headers["toolref-history"] = answer.history
        else:
            self.bodies.append(content)
        if self.speaks and ("toolref-edits" in request.headers or "toolref-history" in headers):
            headers["toolref-edits"] = "2"
        return httpx.Response(200, json={"id": "r"}, headers=headers)


def post(client: httpx.Client, path: str, content: bytes, **headers: str) -> httpx.Response:
    return client.post("https://llm.test" + path, content=content, headers={**JSON, **headers})


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/openai/v1/chat/completions/",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1beta/models/gemini-2.5-pro:generateContent",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
    ],
)
def test_each_llm_endpoint_is_offered_edits_then_sent_them(path: str) -> None:
    receiver = Receiver()
    key = "contents" if "gemini" in path else "input" if "responses" in path else "messages"
    first, second = body(**{key: MESSAGES}), body(**{key: [*MESSAGES, *MESSAGES]})
    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        assert post(client, path, first).status_code == 200
        assert post(client, path, second).status_code == 200
    offered, edited = receiver.sent
    assert offered.headers["toolref-edits"] == str(EDITS_VERSION)
    assert offered.read() == first
    assert edited.headers["content-type"] == MEDIA_TYPE
    assert receiver.bodies == [first, second]


@pytest.mark.parametrize(
    ("method", "path", "headers", "content"),
    [
        ("GET", "/v1/chat/completions", JSON, b""),
        ("POST", "/v1/responses/input_tokens", JSON, body(input=MESSAGES)),
        ("POST", "/v1/embeddings", JSON, body(input=["text"])),
        ("POST", "/v1/chat/completions", {"content-type": "text/plain"}, body(messages=[])),
        ("POST", "/v1/chat/completions", {**JSON, "content-encoding": "gzip"}, b"\x1f\x8b"),
        ("POST", "/v1/chat/completions", {**JSON, "Toolref-Protocol": "2"}, body(messages=[])),
    ],
    ids=["GET", "openai-token-count", "other-path", "not-json", "compressed", "already-toolref"],
)
def test_everything_else_passes_through_untouched(
    method: str, path: str, headers: dict[str, str], content: bytes
) -> None:
    receiver = Receiver()
    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        for _ in range(2):
            client.request(method, "https://llm.test" + path, content=content, headers=headers)
    for sent in receiver.sent:
        assert "toolref-edits" not in sent.headers
        assert sent.read() == content


def test_a_receiver_that_does_not_speak_toolref_is_never_sent_an_edit() -> None:
    receiver = Receiver(speaks=False)
    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        for n in range(3):
            post(client, "/v1/chat/completions", body(messages=MESSAGES * (n + 1)))
    assert all(sent.headers["content-type"] == "application/json" for sent in receiver.sent)
    assert receiver.bodies == [body(messages=MESSAGES * (n + 1)) for n in range(3)]


READER = {"toolref-edits": "4"}  # said by a receiver that reads edits, on every answer
APPLIED = {"toolref-history": "tb_" + "a" * 26, **READER}  # an edit applied: the app's answer


@pytest.mark.parametrize(
    ("status", "media", "said", "resend"),
    [
        (409, "application/problem+json", READER, True),  # missing-history, -pieces
        (400, "application/problem+json", READER, True),  # dictionary-mismatch
        (415, "application/problem+json", {}, True),  # cannot apply now
        (415, "text/html", {}, True),  # a receiver that no longer reads edits
        (413, "application/problem+json", READER, True),  # too-many-items: sent as it is
        (413, "application/problem+json", APPLIED, False),  # the app's own
        (422, "application/problem+json", READER, False),  # a refusal not resent on
        (422, "application/json", {}, True),  # from a receiver that does not read edits
        (409, "application/json", APPLIED, False),  # the app's own, to an applied edit
        (415, "application/json", APPLIED, False),
        (200, "text/event-stream", APPLIED, False),
    ],
)
def test_only_answers_the_manager_may_resend_on_are_read_first(
    status: int, media: str, said: dict[str, str], resend: bool
) -> None:
    answer = httpx.Response(status, headers={"content-type": media, **said})
    assert may_resend(answer) is resend


@pytest.mark.parametrize("name", sorted(UNCARRIABLE))
def test_a_body_no_json_library_writes_back_reaches_the_receiver_as_it_came(name: str) -> None:
    """Cut, not parsed: its edit restores it byte for byte."""
    receiver = Receiver()
    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        assert post(client, "/v1/chat/completions", body(messages=MESSAGES)).status_code == 200
        answer = post(client, "/v1/chat/completions", UNCARRIABLE[name])
    assert answer.status_code == 200
    assert receiver.bodies[-1] == UNCARRIABLE[name]
    assert receiver.sent[-1].headers["content-type"] == MEDIA_TYPE


class Refusing(Receiver):
    """A receiver whose registry is down while `down`: it answers an edit 415 (it cannot
    apply one now) and still offers edits on the requests it serves as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down and request.headers.get("content-type") == MEDIA_TYPE:
            self.sent.append(request)
            problem = {"type": "urn:toolref:problem:unsupported-media-type", "status": 415}
            headers = {"content-type": "application/problem+json"}  # as every receiver's
            return httpx.Response(415, content=json.dumps(problem), headers=headers)
        return super().__call__(request)


def test_a_415_pauses_edits_to_the_endpoint_doubling_until_one_is_answered() -> None:
    """After a 415 the endpoint's requests go as they are for a second, then one edit is
    tried; refused again, the pause doubles; answered, edits go on and the pause resets."""
    receiver = Refusing()
    now = [0.0]
    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    sent: list[bool] = []  # each request: an edit?

    def turn(at: float, n: int) -> None:
        now[0] = at
        before = len(receiver.sent)
        history = [{"role": "user", "content": f"turn {i} " * 20} for i in range(n)]
        with httpx.Client(transport=httpx.MockTransport(receiver)) as client:
            answer = manager.post(
                client, "https://llm.test/v1/chat/completions", {"messages": history}
            )
        assert answer.status_code == 200
        sent.extend(r.headers.get("content-type") == MEDIA_TYPE for r in receiver.sent[before:])

    turn(0.0, 1)  # as it is, offering edits
    turn(0.1, 2)  # an edit
    receiver.down = True
    turn(0.2, 3)  # an edit, 415, then as it is
    turn(0.5, 4)  # paused (1 s): as it is
    turn(1.3, 5)  # the pause over: an edit, 415 again, as it is; paused 2 s now
    turn(2.5, 6)  # as it is
    receiver.down = False
    turn(3.4, 7)  # over: an edit, answered
    turn(3.5, 8)  # an edit
    assert sent == [False, True, True, False, False, True, False, False, True, True]
    assert manager.savings.edits == 3


def test_the_managers_post_sends_one_content_type_whatever_its_case() -> None:
    """`post(..., headers={"content-type": ...})`: the caller's, once (as `client.post(json=)`
    sends it), not the manager's default beside it."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://b") as client:
        given = {"content-type": "application/json; charset=utf-8"}
        payload = {"model": "m", "messages": MESSAGES}
        ToolReferenceManager().post(client, "/chat", json=payload, headers=given)
        ToolReferenceManager().post(client, "/chat", json=payload)
    named = [[v for k, v in r.headers.raw if k.lower() == b"content-type"] for r in seen]
    assert named == [[b"application/json; charset=utf-8"], [b"application/json"]]
