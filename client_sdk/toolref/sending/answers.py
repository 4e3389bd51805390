"""Reading a receiver's answer for what a sender does next: a problem it resends on (a
missing base or pieces, a dictionary mismatch, edits it cannot apply now), whether a
streamed answer was read whole, and the answer itself as the next edit's dictionary
(`read_answer`). Pure functions over `httpx.Response`s (or `httpx2`'s), and the drivers
that read a problem whole before handing a streamed answer back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx

from toolref.edits.answer import AnswerTap, tap_for
from toolref.edits.wire import MEDIA_TYPE as EDIT_TYPE
from toolref.registry.bounded import aread_problem, is_read, read_problem
from toolref.registry.exchange import Exchange, run_async, run_sync
from toolref.registry.packages import NOT_READ, AsyncByteStream2, SyncByteStream2
from toolref.wire.encoding import PROBLEM_TYPE, media_type
from toolref.wire.errors import (
    PROBLEM_BASE,
    MalformedBodyError,
    StoreUnavailableError,
    UnsupportedMediaTypeError,
)
from toolref.wire.headers import EDITS_HEADER, HISTORY_HEADER

R = TypeVar("R")
STORE_UNAVAILABLE = StoreUnavailableError.slug
MALFORMED_BODY = PROBLEM_BASE + MalformedBodyError.slug
UNSUPPORTED_MEDIA_TYPE = PROBLEM_BASE + UnsupportedMediaTypeError.slug


def may_resend(response: httpx.Response) -> bool:
    """An answer the exchange may resend on (400 dictionary-mismatch, 409 missing-history or
    missing-pieces, 400 malformed-body from a receiver rolled back: a problem; a 413 naming
    no recipe, `too-many-items` from a receiver of a lower entries limit, `entries`; a 415
    naming no recipe, from a receiver that cannot apply edits now, or no longer reads
    them), sent before any of the app's answer. A streaming driver reads these whole before the
    exchange sees them (`to_read`), and hands every other answer back unread."""
    media = response.headers.get("content-type", "")
    status, headers = response.status_code, response.headers
    if status == 415 and HISTORY_HEADER not in headers:
        return True  # a 415 to an edit not applied: the request goes again, this one read
    if 400 <= status < 500 and HISTORY_HEADER not in headers and EDITS_HEADER not in headers:
        return True  # from a receiver that does not read edits: it goes again as it is
    if status == 413 and HISTORY_HEADER in headers:
        return False  # the app's own, to an edit applied
    return status in (400, 409, 413) and media.startswith(PROBLEM_TYPE)


def may_be_store_down(response: httpx.Response) -> bool:
    """By its head, `response` may be `store_down`'s: a 503 problem naming no recipe (read
    whole to tell: `to_read`)."""
    return (
        response.status_code == 503
        and HISTORY_HEADER not in response.headers
        and response.headers.get("content-type", "").startswith(PROBLEM_TYPE)
    )


def store_down(response: httpx.Response) -> bool:
    """`response` (read whole) is a receiver's 503 `store-unavailable` to an edit: its store
    down and the edit's base not held where it went. Nothing of the edit was applied or
    kept: the request goes as it is (the receiver serves it without its store), and the
    endpoint's next ones too for a while (`toolref.sending.pause`), as after a 415."""
    if not may_be_store_down(response):
        return False
    problem = problem_of(response)
    return problem is not None and problem.get("type") == PROBLEM_BASE + STORE_UNAVAILABLE


def unreadable(response: httpx.Response) -> bool:
    """`response` (its problem read) is a receiver's 400 `malformed-body` to an edit: one
    that does not read the version the edit's bytes are written in (rolled back); or a chat
    backend's middleware's 415 standing for its registry's (`cause`: a registry rolled
    back). The edit was not applied: the request goes as it is, and the version below is
    said (`toolref.sending.said.Said.unreadable`), no pause."""
    status = response.status_code
    if status not in (400, 415) or HISTORY_HEADER in response.headers:
        return False
    problem = problem_of(response)
    if problem is None:
        return False
    if status == 400:
        return problem.get("type") == MALFORMED_BODY
    return problem.get("type") == UNSUPPORTED_MEDIA_TYPE and problem.get("cause") == MALFORMED_BODY


def to_read(response: Any, request: Any) -> bool:
    """A streamed answer a driver reads (`read_problem`) before the exchange sees it: a
    problem the exchange may resend on (`may_resend`) or act on (`may_be_store_down`), to an
    edit. Any other answer is handed on unread (an answer to a request as it is is the
    app's own); one the exchange resends past needs no body and is closed (`drive`,
    `adrive`)."""
    return (
        media_type(request.headers.get("content-type")) == EDIT_TYPE
        and response.headers.get("content-type", "").startswith(PROBLEM_TYPE)
        and (may_resend(response) or may_be_store_down(response))
    )


def drive(exchange: Exchange[R], send: Callable[[httpx.Request], httpx.Response]) -> R:
    """`run_sync`, every answer but the one returned closed (read or not: an answer the
    exchange resent past held a pooled connection), also when the exchange raises."""
    sent: list[httpx.Response] = []

    def sending(step: httpx.Request) -> httpx.Response:
        sent.append(send(step))
        return sent[-1]

    kept: Any = None
    try:
        kept = run_sync(exchange, sending)
        return kept  # type: ignore[no-any-return]
    finally:
        for response in sent:
            if response is not kept:
                response.close()


async def adrive(
    exchange: Exchange[R], send: Callable[[httpx.Request], Awaitable[httpx.Response]]
) -> R:
    """Async `drive` (cancelled, the answers it had are closed too)."""
    sent: list[httpx.Response] = []

    async def sending(step: httpx.Request) -> httpx.Response:
        sent.append(await send(step))
        return sent[-1]

    kept: Any = None
    try:
        kept = await run_async(exchange, sending)
        return kept  # type: ignore[no-any-return]
    finally:
        for response in sent:
            if response is not kept:
                await response.aclose()


def send_streaming(client: httpx.Client, request: httpx.Request) -> httpx.Response:
    response = client.send(request, stream=True)
    if to_read(response, request):
        read_problem(response)
    return response


async def asend_streaming(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    response = await client.send(request, stream=True)
    if to_read(response, request):
        await aread_problem(response)
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


Answered = Callable[[bytes | None], None]


def edits_said(response: Any) -> int | None:
    """The edits version an answer's `Toolref-Edits` says: 1-3 ASCII digits (`isdigit`
    alone takes `²`, which `int` refuses), as JS's manager reads it; None when it says none."""
    said = response.headers.get(EDITS_HEADER, "").strip()
    return int(said) if said.isascii() and said.isdigit() and len(said) < 4 else None


def read_answer(response: Any, path: str, answered: Answered, version: int) -> None:
    """`response` (httpx's or httpx2's) read as it passes on to the app
    (`toolref.edits.answer.tap_for`): its answer told to `answered` once whole (the receiver
    kept the same bytes), the dictionary of the next edit of the conversation. `version`:
    the edits version the receiver reads (a format whose answers it keeps not: none), or
    the lower one this answer says (`Toolref-Edits`): the receiver that streamed it, one
    replica of 5 among others of 6 (rolling, or rolled back), kept what a receiver of 5
    keeps. An answer already read is read at once; one that cannot be an answer, not at
    all. O(answer)."""
    said = edits_said(response)
    version = version if said is None else min(version, said)
    tap = tap_for(path, response.status_code, response.headers.multi_items(), version)
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
            yield piece  # on its way first: the tap's work follows it
            self._fed(piece)

    def _fed(self, piece: bytes) -> None:
        if self.tap.feed(piece):
            self.answered(self.tap.answer)

    def close(self) -> None:
        self.stream.close()

    async def aclose(self) -> None:
        await self.stream.aclose()
