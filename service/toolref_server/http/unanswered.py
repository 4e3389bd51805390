"""An app's dropped requests answered in problem+json: what the HTTP layer sends when the
app raises, is cancelled by a stop, or returns without answering (uvicorn would send a
text/plain 500). A request a stop cancels is said as a warning, not as a crash; an answer
the app cuts on purpose (`AnswerCut`, said by whoever raised it) ends quietly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from toolref.wire.errors import ServiceUnavailableError, ToolrefError
from toolref_server.http.problem import problem_response

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application

log = logging.getLogger("toolref_server")


class AnswerCut(Exception):
    """Raised by an app whose answer, its head already sent, cannot be finished (an
    upstream that broke off mid-answer), once it has said why (a warning naming what
    failed). The HTTP layer closes the connection short of the answer's end (a chunked one
    without its last chunk, one framed by `Content-Length` short of it: the client sees a
    cut, never an end), and logs no traceback. Not a `ToolrefError`: there is nothing left
    to answer."""


def answering_problems(
    app: ASGI3Application,
    retry_after: int,
    on_head: Callable[[Iterable[tuple[bytes, bytes]]], None] | None = None,
    on_cancelled: Callable[[], None] | None = None,
) -> ASGI3Application:
    """`app`, except that a request it drops without an answer gets a problem+json one
    instead of uvicorn's text/plain 500: a 503 when the request was cancelled (a stop that
    ran out of TOOLREF_SHUTDOWN_TIMEOUT), a 500 for anything else the app let escape.
    `on_head`: given each answer's headers before its head is sent. `on_cancelled`: called
    when a stop cancelled an HTTP request (its 503 sent if nothing was, else its answer cut
    short), which then ends quietly (uvicorn would log the cancellation as "Exception in
    ASGI application", with a traceback); the callback closes the connection. It is called
    too for an answer the app cut (`AnswerCut` after the head), which ends as quietly, with
    no further word: its raiser said what failed."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if on_head is not None:  # the answer's own headers, before they are sent
                    on_head(message.get("headers", ()))
            await send(message)

        try:
            await app(scope, receive, tracked)
        except BaseException as exc:
            if scope["type"] != "http":
                raise
            if isinstance(exc, asyncio.CancelledError) and on_cancelled is not None:
                log.warning(
                    "the service stopped (TOOLREF_SHUTDOWN_TIMEOUT ran out, or a second stop "
                    "signal came) before answering %s %s: %s",
                    scope.get("method"),
                    scope.get("path"),
                    "its answer was cut short" if started else "answered 503",
                )
                if not started:
                    await _closing(_stopping(retry_after), scope, receive, tracked)
                on_cancelled()
                return  # said above: not a crash for uvicorn to log
            if isinstance(exc, AnswerCut) and started and on_cancelled is not None:
                on_cancelled()  # the connection closed short of the answer's end
                return  # said where it was raised: not a crash for uvicorn to log
            if started:
                raise
            if isinstance(exc, asyncio.CancelledError):
                await _closing(_stopping(retry_after), scope, receive, tracked)
            else:
                error = ToolrefError("the service failed unexpectedly; retry later")
                await _closing(error, scope, receive, tracked)
            raise
        if not started and scope["type"] == "http":
            # An app that returns without answering: uvicorn would send a text/plain 500.
            await problem_response(ToolrefError("the service sent no answer; retry later"))(
                scope, receive, tracked
            )

    return cast("ASGI3Application", guarded)


def _stopping(retry_after: int) -> ToolrefError:
    return ServiceUnavailableError(
        "the service is stopping and cancelled this request; retry after "
        f"{retry_after}s (another replica, or this one restarted, will answer)",
        retry_after=retry_after,
    )


async def _closing(error: ToolrefError, scope: Any, receive: Any, send: Any) -> None:
    """`error` as the request's answer, its connection closed after it."""
    response = problem_response(error)
    response.headers["connection"] = "close"
    await response(scope, receive, send)
