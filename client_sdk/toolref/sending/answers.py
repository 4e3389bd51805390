"""Reading a receiver's answer for what a sender does next: a problem it resends on (a
missing base or pieces, a dictionary mismatch, edits it cannot apply now), whether a
streamed answer was read whole, and the answer itself as the next edit's dictionary
(`read_answer`). Pure functions over `httpx.Response`s (or `httpx2`'s), and the drivers
that read a problem whole before handing a streamed answer back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx

from toolref.edits.answer import AnswerTap, tap_for
from toolref.sending.packages import NOT_READ, AsyncByteStream2, SyncByteStream2
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.headers import EDITS_HEADER, HISTORY_HEADER


def may_resend(response: httpx.Response) -> bool:
    """An answer the exchange may resend on (400 dictionary-mismatch, 409 missing-history or
    missing-pieces: a problem; a 415 naming no recipe, from a receiver that cannot apply
    edits now, or no longer reads them), sent before any of the app's answer. A streaming
    driver reads these whole before the exchange sees them, and hands every other answer
    back unread."""
    media = response.headers.get("content-type", "")
    status, headers = response.status_code, response.headers
    if status == 415 and HISTORY_HEADER not in headers:
        return True  # a 415 to an edit not applied: the request goes again, this one read
    if 400 <= status < 500 and HISTORY_HEADER not in headers and EDITS_HEADER not in headers:
        return True  # from a receiver that does not read edits: it goes again as it is
    return status in (400, 409) and media.startswith(PROBLEM_TYPE)


def send_streaming(client: httpx.Client, request: httpx.Request) -> httpx.Response:
    response = client.send(request, stream=True)
    if may_resend(response):
        response.read()
    return response


async def asend_streaming(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    response = await client.send(request, stream=True)
    if may_resend(response):
        await response.aread()
    return response


def problem_of(response: httpx.Response) -> dict[str, Any] | None:
    if response.status_code < 400:
        return None
    if not response.headers.get("content-type", "").startswith(PROBLEM_TYPE):
        return None
    try:
        problem = response.json()
    except (ValueError, *NOT_READ):  # a streamed problem (413, say) is not read
        return None
    return problem if isinstance(problem, dict) else None


def is_read(response: httpx.Response) -> bool:
    """The answer was read whole (a streamed answer not yet read is not); an `httpx` or an
    `httpx2` one."""
    try:
        response.content  # noqa: B018 - raises until the body has been read whole
    except NOT_READ:
        return False
    return True


Answered = Callable[[bytes | None], None]


def read_answer(response: Any, path: str, answered: Answered) -> None:
    """`response` (httpx's or httpx2's) read as it passes on to the app
    (`toolref.edits.answer.tap_for`): its answer told to `answered` once whole (the receiver
    kept the same bytes), the dictionary of the next edit of the conversation. An answer
    already read is read at once; one that cannot be an answer, not at all. O(answer)."""
    tap = tap_for(path, response.status_code, response.headers.multi_items())
    if tap is None:
        return
    if is_read(response):
        if tap.feed(response.content):
            answered(tap.answer)
        return
    response.stream = _Tapped(response.stream, tap, answered)


class _Tapped(httpx.SyncByteStream, httpx.AsyncByteStream, SyncByteStream2, AsyncByteStream2):
    """A response stream (sync or async, of either package), each piece fed to `tap` on its
    way; `answered` told at its end."""

    def __init__(self, stream: Any, tap: AnswerTap, answered: Answered) -> None:
        self.stream, self.tap, self.answered = stream, tap, answered

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.stream:
            self._fed(piece)
            yield piece

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.stream:
            self._fed(piece)
            yield piece

    def _fed(self, piece: bytes) -> None:
        if self.tap.feed(piece):
            self.answered(self.tap.answer)

    def close(self) -> None:
        self.stream.close()

    async def aclose(self) -> None:
        await self.stream.aclose()
