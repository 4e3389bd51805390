"""Reading a receiver's answer for what a sender does next: a problem it resends on (a
missing base or pieces, a dictionary mismatch, edits it cannot apply now), and whether a
streamed answer was read whole. Pure functions over `httpx.Response`s, and the drivers that
read a problem whole before handing a streamed answer back."""

from __future__ import annotations

from typing import Any

import httpx

from toolref.sending.packages import NOT_READ
from toolref.wire.encoding import PROBLEM_TYPE


def may_resend(response: httpx.Response) -> bool:
    """An answer the exchange may resend on (400 dictionary-mismatch, 409 missing-history or
    missing-pieces, 415 from a receiver that cannot apply edits now): a problem, sent
    before any of the app's answer. A streaming driver reads these whole before the exchange
    sees them, and hands every other answer back unread."""
    media = response.headers.get("content-type", "")
    return response.status_code in (400, 409, 415) and media.startswith(PROBLEM_TYPE)


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
