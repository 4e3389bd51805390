"""What `toolref.Transport` and the manager's `stream` do with an answer before the exchange
sees it: a problem to an edit is read, at most 64 KiB of it; an answer the exchange resends
past is closed (it held a pooled connection); every other answer is handed on unread."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx

from toolref.edits.wire import MEDIA_TYPE
from toolref.sending.editor import Editor
from toolref.sending.manager import ToolReferenceManager
from toolref.sending.transport import AsyncTransport, Transport

URL = "https://llm.test/v1/chat/completions"
JSON = {"content-type": "application/json"}
READER = {"toolref-edits": "4"}


def body(turn: int) -> bytes:
    messages = [{"role": "user", "content": f"turn {i} " * 40} for i in range(turn)]
    return json.dumps({"model": "m", "messages": messages}).encode()


class Watched(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A streamed answer's body, in `size` pieces; what was pulled of it, and its close."""

    def __init__(self, content: bytes, size: int = 16 << 10) -> None:
        self.pieces = [content[at : at + size] for at in range(0, len(content), size)]
        self.pulled = 0
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.pulled += len(piece)
            yield piece

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self:
            yield piece

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Receiver:
    """Reads edits once offered them; answers an edit `refusal` (once), then serves."""

    def __init__(self, refusal: httpx.Response | None = None) -> None:
        self.refusal = refusal
        self.kinds: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        edit = request.headers.get("content-type") == MEDIA_TYPE
        self.kinds.append("edit" if edit else "as it is")
        if edit and self.refusal is not None:
            refusal, self.refusal = self.refusal, None
            return refusal
        return httpx.Response(200, json={"id": "r"}, headers={**JSON, **READER})


def test_a_500_to_an_edit_from_no_reader_is_closed_before_the_request_goes_as_it_is() -> None:
    """A backend rolled back answers the edit 500 naming nothing of toolref's (its route's
    `request.json()` threw): the request goes again as it is (`toolref.sending.stranger`),
    and the 500 (never read) is closed, not left holding its pooled connection until the
    client closes."""
    stream = Watched(b"<html>internal server error</html>")
    receiver = Receiver(httpx.Response(500, headers={"content-type": "text/html"}, stream=stream))
    with httpx.Client(transport=Transport(httpx.MockTransport(receiver))) as client:
        assert client.post(URL, content=body(1), headers=JSON).status_code == 200
        assert client.post(URL, content=body(2), headers=JSON).status_code == 200
    assert receiver.kinds == ["as it is", "edit", "as it is"]
    assert stream.closed
    assert stream.pulled == 0


async def test_the_async_transport_closes_an_answer_it_resent_past_too() -> None:
    stream = Watched(b"<html>internal server error</html>")
    receiver = Receiver(httpx.Response(500, headers={"content-type": "text/html"}, stream=stream))
    transport = AsyncTransport(httpx.MockTransport(receiver))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.post(URL, content=body(1), headers=JSON)).status_code == 200
        assert (await client.post(URL, content=body(2), headers=JSON)).status_code == 200
    assert receiver.kinds == ["as it is", "edit", "as it is"]
    assert stream.closed


def test_the_managers_stream_closes_an_answer_it_resent_past() -> None:
    stream = Watched(b"<html>internal server error</html>")
    receiver = Receiver(httpx.Response(500, headers={"content-type": "text/html"}, stream=stream))
    manager = ToolReferenceManager()
    with httpx.Client(transport=httpx.MockTransport(receiver)) as client:
        for turn in (1, 2):
            payload = json.loads(body(turn))
            with manager.stream(client, "POST", URL, json=payload) as answer:
                assert answer.read() == b'{"id":"r"}'
    assert receiver.kinds == ["as it is", "edit", "as it is"]
    assert stream.closed


def test_an_answer_to_a_request_as_it_is_is_handed_on_unread() -> None:
    """The provider's own 400 to the first request (as it is): the app's answer, streamed to
    it as it came, not read whole by the transport first."""
    stream = Watched(b'{"error": {"message": "bad"}}')

    def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, headers=JSON, stream=stream)

    with httpx.Client(transport=Transport(httpx.MockTransport(provider))) as client:
        request = client.build_request("POST", URL, content=body(1), headers=JSON)
        answer = client.send(request, stream=True)
        assert stream.pulled == 0
        assert answer.read() == b'{"error": {"message": "bad"}}'


def test_a_long_problem_to_an_edit_is_read_at_most_64_kib_and_handed_on_whole() -> None:
    """A 409 problem+json with no length, of 1 MiB (no problem of toolref's: theirs are under
    2 KiB): at most 64 KiB of it is read to tell, and the app gets every byte of it."""
    detail = "x" * (1 << 20)
    content = json.dumps({"type": "about:blank", "detail": detail}).encode()
    stream = Watched(content)
    answer = httpx.Response(
        409, headers={"content-type": "application/problem+json", **READER}, stream=stream
    )
    receiver = Receiver(answer)
    transport = Transport(httpx.MockTransport(receiver), shape_problems=False)
    with httpx.Client(transport=transport) as client:
        assert client.post(URL, content=body(1), headers=JSON).status_code == 200
        request = client.build_request("POST", URL, content=body(2), headers=JSON)
        got = client.send(request, stream=True)
        assert got.status_code == 409
        assert stream.pulled <= (64 << 10) + (16 << 10)
        assert got.read() == content
    assert receiver.kinds == ["as it is", "edit"]


def test_the_answers_kept_count_in_max_recipe_bytes() -> None:
    """Each confirmed recipe's answer (up to 256 KiB, the next edit's dictionary) counts in
    the recipes' bound: ten conversations answered 200 KiB each, against 1 MiB, kept 2 MB
    beside the recipes. Past it the least recently used recipes go; the last answer stays."""
    editor = Editor(max_recipes=64, max_bytes=1 << 20)
    refs = []
    for conversation in range(10):
        messages = [{"role": "user", "content": f"conversation {conversation} " * 500}]
        content = json.dumps({"model": "m", "messages": messages}).encode()
        edit = editor.prepare([("content-type", "application/json")], content, "messages")
        assert edit is not None
        assert editor.confirm(edit, edit.ref)
        editor.answered(edit.ref, b"a" * (200 << 10))
        refs.append(edit.ref)
        held = editor.recipes.held_bytes + sum(map(len, editor.answers.values()))
        assert held <= 1 << 20
    assert refs[-1] in editor.answers
    assert refs[-1] in editor.recipes
    assert all(ref in editor.recipes for ref in editor.answers)
