"""Reading a backend's answer for what the manager does next: a problem it resends on
(missing refs or history, a dictionary mismatch), the checkpoint it confirmed, and whether a
streamed answer was read whole. Pure functions over `httpx.Response`s, and the drivers that
read a problem whole before handing a streamed answer back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from toolref.history import history_ref
from toolref.sending.packages import NOT_READ
from toolref.sending.upload import Upload
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import DictionaryMismatchError, MissingHistoryError, MissingRefsError

MISSING_REFS = MissingRefsError.problem_type()
MISSING_HISTORY = MissingHistoryError.problem_type()
DICTIONARY_MISMATCH = DictionaryMismatchError.problem_type()


def checkpoint(header: str | None, upload: Upload) -> tuple[str, int] | None:
    """(ref, length) of the checkpoint the server confirmed, when it is a prefix this
    client computed itself (a checkpoint ends a few messages before the end)."""
    if header is None or not upload.chain:
        return None
    ref = header.strip()
    chain = upload.chain
    for length in range(len(chain) - 1, max(len(chain) - 65, 0), -1):
        if history_ref(chain[length - 1]) == ref:
            return ref, length
    return None


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


def is_read(response: httpx.Response) -> bool:
    """The answer was read whole (a streamed answer not yet read is not); an `httpx` or an
    `httpx2` one."""
    try:
        response.content  # noqa: B018 - raises until the body has been read whole
    except NOT_READ:
        return False
    return True


def builder(
    client: httpx.Client | httpx.AsyncClient, url: str, kwargs: dict[str, Any]
) -> Callable[[bytes, dict[str, str]], httpx.Request]:
    options = {k: v for k, v in kwargs.items() if k != "headers"}
    extra_headers = dict(kwargs.get("headers") or {})

    def build(content: bytes, headers: dict[str, str]) -> httpx.Request:
        return client.build_request(
            "POST", url, content=content, headers={**extra_headers, **headers}, **options
        )

    return build


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


def problem_type(response: httpx.Response) -> str | None:
    problem = problem_of(response)
    kind = problem.get("type") if problem is not None else None
    return kind if isinstance(kind, str) else None


def missing_refs(response: httpx.Response) -> list[str] | None:
    """The refs a 409 missing-refs problem lists; None for any other answer."""
    problem = problem_of(response) if response.status_code == 409 else None
    if problem is None or problem.get("type") != MISSING_REFS:
        return None
    missing = problem.get("missingRefs")
    return [str(ref) for ref in missing] if isinstance(missing, list) else []
