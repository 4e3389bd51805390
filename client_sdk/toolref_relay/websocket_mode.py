"""The relay's WebSocket mode: an agent's `GET /llm/{name}/{path}` upgraded (Codex's
Responses WebSocket, `.../v1/responses`) joined to the gateway's WebSocket at the same path.

The relay first opens its own socket to the gateway (`toolref.websocket`: the agent's
headers and credentials, `Toolref-Key`, `Toolref-Frames: 2`), and accepts the agent's only
once the gateway accepted: a gateway that cannot (an upstream without WebSockets, an old
gateway, one that does not answer, any refusal) makes the relay answer the upgrade with
**426** at once, in the provider's error shape, so the agent goes on over HTTP after one
attempt (Codex answered 403, 404 or 500 retries seven times, about 7 s, first); a refusal
that is a toolref problem (the tenant's requests in flight, a key it does not know) is told
in that answer and the relay's line in the words the relay's HTTP answer gives it
(`problems.gateway_said`).

Then `toolref.websocket.bridge` joins them: each text message of the agent's travels as an
edit of the one before it, its new segments each compressed alone
(`toolref.websocket.frames`; a `response.create` repeats its instructions and tools every
turn; `--no-size-guard`: compressed against the one before), and the gateway restores the
agent's exact bytes;
the gateway's messages (the provider's events) reach the agent exactly, in order, as they
come. On an LLM endpoint's path (`toolref.wire.endpoints.socket_turns`), each message sent
to the gateway is a turn, as over HTTP: its turn line, in its agent and upstream's totals,
with its bytes as the agent sent them (raw) and as the relay sent them (wire: the frame),
the numbers the gateway counts for it on /metrics and the savings page. Its log line, at
the end, tells the bytes of every message sent, as the agent sent them and as they went.
Context editing is not applied over a WebSocket (docs/context-editing.md): with
`--context-editing` the upgrade carries the ask to the gateway, which counts it, and the
relay says the session gets none. A path with a dot segment is answered 400, as over HTTP.

Limits: a message of `--max-body-bytes` either way (1009); each message charged to the
relay's budget of bytes in flight (`--max-inflated-in-flight`) while held; the gateway's
idle and lifetime limits close both hops, and the relay's own are a day (`IDLE`,
`LIFETIME`); a side that takes nothing of a message for `--send-timeout` seconds (30 s)
ends both 1001, and until then is not read for (the relay stops reading the other side);
the close to an agent that reads nothing waits at most `toolref.websocket.driver.CLOSE_TIMEOUT`
(the bridge's), and its connection is dropped `--send-timeout` seconds after that if its
bytes still went nowhere (`toolref.asgi.paced`, the relay's
WebSocket protocol, which also stops reading an agent that reads nothing, pings included).
The path and query go to the gateway as the agent sent them (a `#` too:
`toolref.websocket.driver.connect`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit, urlunsplit

from toolref.asgi.scope import Receive, Scope, Send
from toolref.asgi.workers import Workers
from toolref.websocket.bridge import Limits, bridge
from toolref.websocket.driver import Refusal, Unreachable, connect
from toolref.websocket.frames import Encoder, Mode
from toolref.wire.endpoints import socket_turns
from toolref.wire.headers import FRAMES_HEADER, FRAMES_VERSION
from toolref.wire.shapes import ErrorReply, error_reply, provider_of

from . import guard
from .calls import Call, log_call
from .headers import decoded, first, to_agent, to_gateway
from .ledger import Upload, who
from .problems import gateway_said

if TYPE_CHECKING:
    from .link import GatewayLink

IDLE: Final = 86_400.0  # seconds; the gateway's TOOLREF_GATEWAY_WS_IDLE_TIMEOUT acts first
LIFETIME: Final = 86_400.0
_ROUTE: Final = re.compile(r"^/llm/([^/]+)(/.*)?$")
# The upgrade's own headers: the relay's client writes its own for the gateway.
_HANDSHAKE: Final = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
# Compressing a message of this many bytes or more runs in a thread, off the loop.
_WORKERS: Final = Workers(None, 256 * 1024)


def gateway_socket_url(gateway: str, path: str) -> str:
    """`ws(s)://` of the gateway's base URL, with `path` (query included) after it."""
    parts = urlsplit(gateway)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path, "", "")) + path


def _without_handshake(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in pairs if k.lower() not in _HANDSHAKE]


async def serve_socket(link: GatewayLink, scope: Scope, receive: Receive, send: Send) -> None:
    """One agent WebSocket; see the module docstring."""
    if (await receive())["type"] != "websocket.connect":
        return
    path = scope["path"]
    headers = decoded(scope["headers"])
    provider = provider_of(path, headers)
    refused = guard.host_refusal(first(headers, "host"), scope.get("server"))
    refused = refused or guard.origin_refusal(first(headers, "origin"))
    if refused is not None:
        await refuse(send, error_reply(provider, 403, refused, "toolref_forbidden"))
        return
    raw_path = scope.get("raw_path") or path.encode()
    found = _ROUTE.match(raw_path.decode("latin-1"))
    if found is None:
        message = f"the relay serves WebSockets at /llm/{{name}}/... (not {path})"
        await refuse(send, error_reply(provider, 404, message, "toolref_not_served"))
        return
    dots = guard.path_refusal(found.group(0))
    if dots is not None:  # as over HTTP: 400, no retry cures it; nothing sent on
        await refuse(send, error_reply(provider, 400, dots, "toolref_bad_path"))
        return
    query = scope.get("query_string", b"").decode("latin-1")
    call = Call("GET", found.group(1), found.group(2) or "/", query, headers, provider)
    await _joined(link, call, list(scope.get("subprotocols") or ()), receive, send)


async def _joined(
    link: GatewayLink, call: Call, subprotocols: list[str], receive: Receive, send: Send
) -> None:
    config = link.config
    upstream = link.switchboard.route(call.name)
    outgoing = _without_handshake(
        to_gateway(
            call.headers,
            key=config.key,
            switched_from=None,
            body_changed=False,
            context_editing=config.context_editing,
        )
    )
    url = gateway_socket_url(config.gateway, f"/llm/{upstream}{call.suffix()}")
    frames, mode = await _frames(link)
    try:
        socket = await connect(
            url,
            [*outgoing, (FRAMES_HEADER, frames)],
            subprotocols=subprotocols,
            max_message=config.max_body_bytes,
            connect_timeout=config.connect_timeout,
        )
    except (Refusal, Unreachable) as exc:
        if isinstance(exc, Refusal):  # a quota's, a key's: said as over HTTP
            said = gateway_said(exc.status, exc.body, call, config.gateway)
            why = f"answered {exc.status}" + ("" if said is None else f" ({said})")
        else:
            why = f"failed ({exc})"
        message = (
            f"toolref relay: the WebSocket to the gateway {config.gateway} {why}; "
            "use HTTP for this session (the agent falls back to it on this 426)"
        )
        link.report(message)
        log_call(call, upstream, 426, None, None)
        await refuse(send, error_reply(call.provider, 426, message, "toolref_no_websocket"))
        return
    accepted = socket.accepted
    await send(
        {
            "type": "websocket.accept",
            "subprotocol": accepted.subprotocol,
            "headers": to_agent(_without_handshake(decoded(accepted.headers))),
        }
    )
    turns = socket_turns(call.path)
    if turns and config.context_editing:
        link.report(
            f"toolref relay: context editing is not applied over a WebSocket (/llm/{call.name}"
            f"{call.path}): its turns go as they came; run the agent over HTTP to have old "
            "tool results replaced"
        )
    encoder = Encoder(mode)
    whose = who(call.headers, upstream)
    raw_sent = 0

    async def compressed(message: str | bytes) -> str | bytes:
        return await _WORKERS.run(len(message), encoder.encode, message)

    def turn(raw: int, wire: int) -> None:
        nonlocal raw_sent
        raw_sent += raw
        if turns:
            link.told(whose, Upload(raw, raw, wire, "gateway"))  # messages: no header lines

    limits = Limits(config.max_body_bytes, IDLE, LIFETIME, config.send_timeout)
    ended = await bridge(
        receive,
        send,
        socket,
        limits,
        inbound=compressed,
        account=link.budget.account,
        on_sent=turn,
    )
    log_call(call, upstream, 101, raw_sent, ended.sent_bytes)


async def _frames(link: GatewayLink) -> tuple[str, Mode]:
    """`Toolref-Frames` and how the agent's messages travel: size-guarded (each an edit of
    the one before, its new segments compressed alone: `2`; toward a gateway that reads
    version 1 only, as they are), or against the one before (`--no-size-guard`: `1`)."""
    if not link.config.size_guard:
        return "1", "against-previous"
    if await link.takes_edits() and link.capabilities.version >= 2:
        return FRAMES_VERSION, "segmented"
    return "1", "as-is"


async def refuse(send: Send, error: ErrorReply) -> None:
    """`error` as the plain HTTP answer to the agent's upgrade."""
    headers = [
        (b"content-type", error.media_type.encode()),
        (b"content-length", str(len(error.body)).encode()),
    ]
    await send(
        {"type": "websocket.http.response.start", "status": error.status, "headers": headers}
    )
    await send({"type": "websocket.http.response.body", "body": error.body})
