"""The Python `Sender` and the TypeScript manager recover alike from a backend that stops
reading edits (docs/edits.md, "Misses, and how they recover"): only a toolref problem
(`urn:toolref:problem:`) or `Toolref-Edits` says a receiver of edits answered. A backend rolled
back whose framework answers an edit with a problem+json of its own (Spring's `about:blank`,
ASP.NET's RFC 9110 link), 400 or 415, gets the request again as it is, and the endpoint is
forgotten; toolref's own 415 (its registry down) pauses edits and keeps the endpoint. An
answer's `Toolref-Edits` is read as 1-3 ASCII digits, as the TypeScript manager reads it."""

from __future__ import annotations

import json

import httpx
import pytest

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.transport import Transport

URL = "https://llm.test/v1/chat/completions"
JSON = {"content-type": "application/json"}
PROBLEM = {"content-type": "application/problem+json"}
SPRING = "about:blank"
ASP_NET = "https://tools.ietf.org/html/rfc9110#section-15.5.1"
UNSUPPORTED = "urn:toolref:problem:unsupported-media-type"


def body(turn: int) -> bytes:
    messages = [{"role": "user", "content": f"turn {i}: " + "why " * 40} for i in range(turn)]
    return json.dumps({"model": "m", "messages": messages}).encode()


class RollingBack:
    """A receiver of edits (it answers `Toolref-Edits: 4` and confirms each edit's recipe)
    until `refusal` is set: then a backend without toolref, answering an edit with it and a
    request as it is with the app's 200 (no `Toolref-Edits`: it reads no edits)."""

    def __init__(self) -> None:
        self.refusal: httpx.Response | None = None
        self.kinds: list[str] = []
        self.plain: list[bytes] = []
        self.turn = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        edit = request.headers.get("content-type") == MEDIA_TYPE
        self.kinds.append("edit" if edit else "as it is")
        if self.refusal is None:
            self.turn += 1
            said = {"toolref-edits": "4"}
            if edit:  # an edit applied, confirmed as its own recipe (the editor checks none)
                said["toolref-history"] = "tb_" + "a" * 25 + "aeimquy4"[self.turn % 8]
            return httpx.Response(200, json={"id": "r"}, headers=said)
        if edit:
            return self.refusal
        self.plain.append(request.read())
        return httpx.Response(200, text="answered", headers={"content-type": "text/plain"})


def problem(status: int, kind: str) -> httpx.Response:
    content = {"type": kind, "title": "Bad Request", "status": status, "detail": "unreadable"}
    return httpx.Response(status, json=content, headers=PROBLEM)


def run(receiver: RollingBack, refusal: httpx.Response, *, pause_over: bool = False) -> None:
    """Two turns to a receiver of edits, then three to the backend rolled back (the last
    after any pause is long over): each gets the app's answer to its request as made."""
    now = [0.0]
    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    transport = Transport(httpx.MockTransport(receiver), manager=manager)
    with httpx.Client(transport=transport) as client:
        for turn in (1, 2):
            assert client.post(URL, content=body(turn), headers=JSON).status_code == 200
        receiver.refusal = refusal
        for turn in (3, 4, 5):
            if turn == 5 and pause_over:
                now[0] += 3600.0
            answer = client.post(URL, content=body(turn), headers=JSON)
            assert (answer.status_code, answer.text) == (200, "answered")
            assert receiver.plain[-1] == body(turn)


@pytest.mark.parametrize("kind", [SPRING, ASP_NET])
def test_a_frameworks_own_400_problem_to_an_edit_is_resent_as_it_is_and_forgotten(
    kind: str,
) -> None:
    receiver = RollingBack()
    run(receiver, problem(400, kind))
    assert receiver.kinds == ["as it is", "edit", "edit", "as it is", "as it is", "as it is"]


@pytest.mark.parametrize(
    "refusal",
    [
        problem(415, SPRING),  # Spring's: Content-Type 'application/vnd.toolref.edit' ...
        problem(415, ASP_NET),
        httpx.Response(415, text="Unsupported Media Type", headers={"content-type": "text/plain"}),
    ],
    ids=["spring", "asp-net", "plain"],
)
def test_a_415_from_no_receiver_of_edits_is_resent_as_it_is_and_the_endpoint_forgotten(
    refusal: httpx.Response,
) -> None:
    """The app gets its request's answer (not the framework's 415), and the endpoint no edit
    again, not even once the pause after the 415 is over (it was tried every 30 s)."""
    receiver = RollingBack()
    run(receiver, refusal, pause_over=True)
    assert receiver.kinds == ["as it is", "edit", "edit", "as it is", "as it is", "as it is"]


def test_toolrefs_own_415_pauses_edits_and_keeps_the_endpoint() -> None:
    """Its registry down: the request goes as it is, and once the pause is over an edit is
    tried again (the receiver still reads edits)."""
    receiver = RollingBack()
    run(receiver, problem(415, UNSUPPORTED), pause_over=True)
    assert receiver.kinds == [
        *["as it is", "edit"],
        *["edit", "as it is"],  # refused 415: as it is, paused
        "as it is",  # paused
        *["edit", "as it is"],  # the pause over: an edit again
    ]


def test_toolrefs_own_503_store_unavailable_pauses_edits_as_a_415_does() -> None:
    """The receiver's store down, the edit's base not held where it went: the request
    goes as it is (served without the store), edits pause and come back."""
    receiver = RollingBack()
    run(receiver, problem(503, "urn:toolref:problem:store-unavailable"), pause_over=True)
    assert receiver.kinds == [
        *["as it is", "edit"],
        *["edit", "as it is"],  # refused 503 store-unavailable: as it is, paused
        "as it is",  # paused
        *["edit", "as it is"],  # the pause over: an edit again
    ]


def test_another_503_to_an_edit_is_the_apps_to_see() -> None:
    """An overloaded receiver (or a provider's 503) is answered as it came: nothing to
    resend as it is, which would only add load."""
    now = [0.0]
    manager = ToolReferenceManager()
    manager.sender.clock = lambda: now[0]
    receiver = RollingBack()
    transport = Transport(httpx.MockTransport(receiver), manager=manager)
    with httpx.Client(transport=transport) as client:
        for turn in (1, 2):
            client.post(URL, content=body(turn), headers=JSON)
        receiver.refusal = problem(503, "urn:toolref:problem:overloaded")
        answer = client.post(URL, content=body(3), headers=JSON)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "toolref_overloaded"  # in the API's shape
    assert receiver.kinds[-1] == "edit"


NOT_READ = {
    "latin-1-superscript": b"\xb2",
    "utf-8-superscript": "\u00b2".encode(),
    "arabic-indic": "\u0663".encode(),
    **{said: said.encode() for said in ("4.0", "0x4", "+4", "1e0", "0004", "0", "")},
}


@pytest.mark.parametrize("name", sorted(NOT_READ))
def test_a_toolref_edits_value_other_than_1_to_3_ascii_digits_is_not_read(name: str) -> None:
    """`²` (a byte 0xb2, or UTF-8) raised ValueError out of the exchange: `str.isdigit` takes
    it, `int` does not. Such a value says nothing: the next request goes as it is too."""
    said = NOT_READ[name]
    kinds: list[str] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        kinds.append("edit" if request.headers.get("content-type") == MEDIA_TYPE else "as it is")
        return httpx.Response(200, json={"id": "r"}, headers=[(b"toolref-edits", said)])

    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        for turn in (1, 2):
            assert client.post(URL, content=body(turn), headers=JSON).status_code == 200
    assert kinds == ["as it is", "as it is"]


@pytest.mark.parametrize("said", [b"4", b" 3 ", b"04", b"999"])
def test_a_toolref_edits_value_of_ascii_digits_is_read(said: bytes) -> None:
    kinds: list[str] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        kinds.append("edit" if request.headers.get("content-type") == MEDIA_TYPE else "as it is")
        return httpx.Response(200, json={"id": "r"}, headers=[(b"toolref-edits", said)])

    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        for turn in (1, 2):
            assert client.post(URL, content=body(turn), headers=JSON).status_code == 200
    assert kinds == ["as it is", "edit"]
