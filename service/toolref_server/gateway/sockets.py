"""`Sockets`: a WebSocket to `/llm/{name}/{path}` joined to the upstream's own WebSocket at
`{base_url}/{path}` (the OpenAI Responses API's WebSocket mode, say), as the gateway.

Refusals come before anything is accepted, each as a plain HTTP answer to the upgrade
(problem+json): the `Toolref-Key` (401), the path (400, 404), the tenant's and the
process's gateway requests in flight (429, 503: a socket holds one slot while it is open).
Then the gateway opens the upstream's WebSocket (`toolref.websocket`: `ws://` or `wss://`
from the base URL, the same path and query as the client sent them, a `#` included, as
over HTTP; the client's end-to-end headers and credentials as they came, none of
toolref's) and accepts the client's only once the upstream accepted it: an upstream that
refuses the upgrade (no WebSocket there, an old server, any status) makes the gateway
answer **426** (`websocket-unavailable`), one it cannot reach 502, so a client falls back
to HTTP at once.

Once open, `toolref.websocket.bridge` joins them: the upstream's messages reach the client
exactly, in order, as they come; the client's go upstream, restored first when the relay
sent them as `toolref.websocket.frames` (`Toolref-Frames: 2` or `1`: each text message sent
against the one before it), so the upstream receives the agent's bytes exactly. Limits
(TOOLREF_GATEWAY_WS_*): a message's bytes (1009), seconds without a message (idle) and
seconds open (lifetime), both 1001; each message is charged to the process's budget of
bytes in flight while it is held. A side that reads nothing is not read for: the bridge
stops reading the other side (one message held each way), and after `TOOLREF_SEND_TIMEOUT`
seconds in which it took nothing of a message the socket ends 1001, both hops closed. The
close the gateway sends its client waits at most
`toolref.websocket.driver.CLOSE_TIMEOUT` seconds (the bridge's, for each side): a client
that reads nothing (its window full) is let go then, with the tenant's slot, where it held
them for as long as it kept its connection. Below the bridge, the service's WebSocket
protocol (`toolref_server.http.websocket`) stops reading a client whose pongs and messages
it cannot write, and drops its connection after `TOOLREF_SEND_TIMEOUT` seconds in which it
took nothing, or in which its closed connection's bytes went nowhere.

On an LLM endpoint's path (`toolref.wire.endpoints.socket_turns`: the Responses API's
WebSocket), each client message sent upstream is a turn, counted as an HTTP request is
(`Metrics.gateway_usage`: /metrics and the savings page): one request for the tenant and
upstream, its bytes as sent upstream (raw) and as received (wire: the frame, when the relay
compressed it).

Context editing (docs/context-editing.md) is not applied over a WebSocket: a session on such
a path whose `Toolref-Context-Editing` header or operator's policy asks for it says so, an
info line at the upgrade naming which asked, and one count in
`toolref_context_requests_total{outcome="socket"}`; a header of another value than `on` or
`off` is not read (not refused).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Final

from starlette.types import Receive, Scope, Send

from toolref.asgi.budget import Budget
from toolref.asgi.hops import decoded, encoded, end_to_end, without_toolref
from toolref.asgi.scope import header
from toolref.asgi.workers import Workers
from toolref.websocket.bridge import Limits, bridge
from toolref.websocket.driver import Refusal, Unreachable, connect
from toolref.websocket.frames import Decoder
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.endpoints import socket_turns
from toolref.wire.errors import BadRequestError, ToolrefError
from toolref.wire.headers import FRAMES_HEADER, FRAMES_VERSIONS
from toolref_server.context.policy import context_header, wanted
from toolref_server.gateway.forwarder import UpstreamUnreachableError, request_headers
from toolref_server.gateway.gate import GatewayAdmission
from toolref_server.gateway.upstreams import Route
from toolref_server.http.problem import problem_body
from toolref_server.metrics import Metrics
from toolref_server.settings import Settings
from toolref_server.usage import Counts

log = logging.getLogger("toolref.gateway")

# The upgrade's own headers: the gateway's client writes its own for the upstream.
_HANDSHAKE: Final = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
        "host",
        "content-length",
    }
)


class WebSocketUnavailableError(ToolrefError):
    """The upstream does not serve a WebSocket at this path (it refused the upgrade)."""

    slug = "websocket-unavailable"
    status = 426
    title = "WebSocket unavailable"


def upstream_headers(scope: Scope, found: Route) -> list[tuple[str, str]]:
    """The client's upgrade headers for the upstream's: end to end, none of toolref's and
    none of the handshake's own (the gateway's client writes those), the base URL's
    credentials in place of the client's `Authorization` (as over HTTP)."""
    return [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in request_headers(scope, found)
        if k.decode("latin-1").lower() not in _HANDSHAKE
    ]


def accept_headers(headers: tuple[tuple[bytes, bytes], ...]) -> list[tuple[bytes, bytes]]:
    """The upstream's accepting headers for the client: end to end, none of toolref's and
    none of the handshake's (the client's server writes its own)."""
    kept = without_toolref(end_to_end(decoded(headers)))
    return encoded([(k, v) for k, v in kept if k.lower() not in _HANDSHAKE])


def websocket_url(found: Route, query: bytes) -> str:
    scheme = "wss" if found.upstream.scheme == "https" else "ws"
    return f"{scheme}://{found.upstream.host_header}{found.target(query).decode('ascii')}"


class Sockets:
    """See the module docstring. Shares the gateway's gate (`gate`), budget,
    workers and metrics."""

    def __init__(
        self,
        settings: Settings,
        admission: GatewayAdmission,
        budget: Budget,
        workers: Callable[[], Workers],
        *,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.admission = admission
        self.budget = budget
        self.workers = workers
        self.limits = Limits(
            settings.gateway_ws_max_message_bytes,
            settings.gateway_ws_idle_timeout,
            settings.gateway_ws_lifetime,
            settings.send_timeout,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            with self.admission.admitted(scope, http=False) as admitted:
                await self._joined(scope, receive, send, admitted.route, admitted.tenant)
        except ToolrefError as exc:
            await refuse(send, exc)

    async def _joined(
        self, scope: Scope, receive: Receive, send: Send, found: Route, tenant: str
    ) -> None:
        settings = self.settings
        try:
            upstream = await connect(
                websocket_url(found, scope.get("query_string", b"")),
                upstream_headers(scope, found),
                subprotocols=scope.get("subprotocols") or (),
                max_message=settings.gateway_ws_max_message_bytes,
                connect_timeout=settings.gateway_connect_timeout,
            )
        except Refusal as exc:
            raise WebSocketUnavailableError(
                f"upstream {found.name!r} ({found.upstream.shown}) answered the WebSocket "
                f"upgrade with {exc.status}: it serves no WebSocket at this path; use HTTP "
                "(a client that gets 426 falls back to it)"
            ) from None
        except Unreachable as exc:
            raise UpstreamUnreachableError(
                f"upstream {found.name!r} ({found.upstream.shown}) cannot be reached for a "
                f"WebSocket ({exc}); check TOOLREF_UPSTREAMS and that the upstream is up"
            ) from None
        accepted = upstream.accepted
        await send(
            {
                "type": "websocket.accept",
                "subprotocol": accepted.subprotocol,
                "headers": accept_headers(accepted.headers),
            }
        )
        decoder = None
        if header(scope, FRAMES_HEADER) in FRAMES_VERSIONS:
            decoder = Decoder(settings.gateway_ws_max_message_bytes)
        inbound = None
        if decoder is not None:
            restore = decoder.decode

            async def inbound(message: str | bytes) -> str | bytes:
                workers = self.workers()
                return await workers.run(workers.weigh(message), restore, message)

        counted = None
        if socket_turns(found.path):
            self._unedited(scope, found, tenant)
            usage, name = self.metrics.gateway_usage, found.name

            def counted(received: int, sent: int) -> None:
                usage(tenant, name, Counts(requests=1, raw=sent, wire=received))

        ended = await bridge(
            receive,
            send,
            upstream,
            self.limits,
            inbound=inbound,
            account=partial(self.budget.account, tenant),  # the tenant's share too
            on_sent=counted,
        )
        log.info(
            "WebSocket /llm/%s%s ended by the %s (%d %s): %d messages up, %d down",
            found.name,
            found.path,
            ended.by,
            ended.code,
            ended.reason,
            ended.sent,
            ended.received,
        )

    def _unedited(self, scope: Scope, found: Route, tenant: str) -> None:
        """A session that asks for context editing told it gets none (see the module
        docstring)."""
        asked = context_header(scope)
        try:
            on = wanted(self.settings.context_policy.of(found.name, tenant), asked)
        except BadRequestError:  # not read over a WebSocket: the session goes on as it came
            on = False
        if not on:
            return
        why = "its Toolref-Context-Editing header" if asked is not None else "the policy"
        log.info(
            "WebSocket /llm/%s%s: context editing is not applied over a WebSocket (asked by "
            "%s); its turns go as they came (use HTTP to have old tool results replaced)",
            found.name,
            found.path,
            why,
        )
        self.metrics.context_requests.labels("socket").inc()


async def refuse(send: Send, error: ToolrefError) -> None:
    """`error` as the plain HTTP answer to a WebSocket upgrade (problem+json)."""
    body = problem_body(error, for_llm_sdks=True)
    headers = [
        (b"content-type", PROBLEM_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        *((k.lower().encode(), v.encode()) for k, v in error.http_headers().items()),
    ]
    await send(
        {"type": "websocket.http.response.start", "status": error.status, "headers": headers}
    )
    await send({"type": "websocket.http.response.body", "body": body})
