"""The access middleware: a request id, one access log line and the metrics of each request.

The id is the client's `X-Request-Id` when it is a plain token (so a chat backend can follow
one request through its logs and ours), otherwise a fresh one; it is sent back in the same
header and carried by every log line written while the request runs. An answer that already
names itself in that header (an upstream's, forwarded by the gateway: OpenAI's `req_...`, the
id its support asks for) keeps its own, untouched: the access line logs it as
`upstreamRequestId` next to ours, so either one finds the other; one that is no plain token
(a peer's text) as `redaction.printable` shows it, escaped and cut to `UPSTREAM_SHOWN`
characters. An empty one names nothing: ours replaces it.

A turn a channel carries (`toolref.receiving.channel_server`) gets its own line and metrics,
as over HTTP, marked `channel: true`: the gateway serves each through this middleware too
(this one, outside it, sees only the channel's upgrade).

A request whose client hangs up before its answer starts is counted and logged with status
499 (`CLIENT_CLOSED`), not 500: an agent cancelling a turn is no failure of the service.

It is also the last line of defence: an exception no handler caught becomes a logged
traceback and a 500 problem+json that carries the request id, instead of a bare 500.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolref.receiving.channel_server import on_channel
from toolref.wire.errors import ToolrefError
from toolref.wire.redaction import printable
from toolref_server.http.problem import problem_response
from toolref_server.logs import REQUEST_ID
from toolref_server.metrics import UNMATCHED, Metrics, method_label

REQUEST_ID_HEADER: Final = "X-Request-Id"
# The status a request is counted and logged with when its client hung up before any answer
# started (nginx's "client closed request"): not a 500, which says the service failed.
CLIENT_CLOSED: Final = 499
_HEADER_KEY: Final = REQUEST_ID_HEADER.lower().encode()
_TOKEN: Final = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
UPSTREAM_SHOWN: Final = 128  # characters of an upstream's id logged; the rest counted

log = logging.getLogger("toolref_server.access")  # the name operators filter on: kept


def unexpected(request_id: str) -> ToolrefError:
    """The 500 answered for an exception no handler caught, logged under `request_id`."""
    return ToolrefError(
        f"the service failed unexpectedly; the error is logged under request id "
        f"{request_id}; retry later, and report the id if it persists"
    )


def request_id_of(scope: Scope) -> str:
    for key, value in scope["headers"]:
        if key == _HEADER_KEY and _TOKEN.fullmatch(value):
            return str(value.decode())
    return uuid.uuid4().hex


def upstream_of(values: list[bytes]) -> bytes:
    """The id an answer names itself by: its first `X-Request-Id` that is not empty."""
    return next(value.strip() for value in values if value.strip())


def route_of(scope: Scope) -> str:
    """The route template (`/v1/invocations/{ref}`), never the raw path: labels stay few."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class AccessMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status, received, sent = 500, 0, 0  # 500 unless an answer starts
        answered = gone = False
        upstream_id: str | None = None  # the answer's own id (an upstream's), when it had one

        async def counted_receive() -> Message:
            nonlocal received, gone
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            elif message["type"] == "http.disconnect":
                gone = True
            return message

        async def tagged_send(message: Message) -> None:
            nonlocal status, sent, answered, upstream_id
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
                headers = list(message.get("headers", []))
                own = [v for k, v in headers if k.lower() == _HEADER_KEY]
                if any(value.strip() for value in own):
                    # an upstream's answer naming itself: its id kept, for its support; logged
                    # as a peer's text is (a plain token as it is)
                    upstream_id = printable(upstream_of(own).decode("latin-1"), UPSTREAM_SHOWN)
                else:  # none, or an empty one (naming nothing): ours
                    kept = [(k, v) for k, v in headers if k.lower() != _HEADER_KEY]
                    message = {**message, "headers": [*kept, (_HEADER_KEY, request_id.encode())]}
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counted_receive, tagged_send)
        except Exception:
            if answered:
                raise  # too late for a problem answer; the server closes the connection
            log.exception("unhandled error", extra={"request_id": request_id})
            await problem_response(unexpected(request_id))(scope, counted_receive, tagged_send)
        finally:
            if gone and not answered:  # the client left first: no answer, and no fault of ours
                status = CLIENT_CLOSED
            elapsed = time.perf_counter() - started
            route, method = route_of(scope), scope["method"]
            m, labelled = self.metrics, method_label(method)  # never a client's own token
            m.requests.labels(labelled, route, str(status)).inc()
            m.latency.labels(labelled, route).observe(elapsed)
            m.bytes_in.labels(route).inc(received)
            m.bytes_out.labels(route).inc(sent)
            log.info(
                "%s %s %d",
                method,
                route,
                status,
                extra={
                    "request_id": request_id,
                    "method": method,
                    "route": route,
                    "status": status,
                    "durationMs": round(elapsed * 1000, 2),
                    "bytesIn": received,
                    "bytesOut": sent,
                    **({"upstreamRequestId": upstream_id} if upstream_id else {}),
                    **({"channel": True} if on_channel(scope) else {}),
                },
            )
            REQUEST_ID.reset(token)
