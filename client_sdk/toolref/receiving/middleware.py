"""`ToolRefMiddleware`: edits and refs for Python chat backends (Starlette, FastAPI, any
ASGI app).

A client that sends edits (`Content-Type: application/vnd.toolref.edit`: the SDK's manager
and `toolref.Transport`, `toolrefFetch`) gets its request restored through the registry
(`toolref.receiving.restoring`): the app receives exactly the request the client's own SDK
made, body byte for byte. The requests it restored are held (`toolref.receiving.held`, up to
`held_bytes`), so the registry answers the next edit of a conversation with what changed. A
client offering edits (`Toolref-Edits`) is told they are read
here. A client speaking protocol 2 (`Toolref-Protocol: 2`, `toolRef` markers) gets its body
hydrated before the app sees it (`toolref.receiving.hydrator`), every message as the client
wrote it; the answer lists the refs of payloads it sent in full (`toolReferences` added to a
JSON answer, or a `Toolref-References` header on anything else, event streams included). An
unknown ref is answered with 409 and `missingRefs`, and the client resends those payloads
in full. The history-ref protocol of 0.2 is refused (400 `history-refs-retired`).

A client whose turns ride a channel (the SDK's `AsyncTransport`: one WebSocket at
`channel_path`, when set, `toolref.receiving.channel_server`) has each turn served here
as the HTTP request it stands for, its answer streamed back on the channel: the app sees
the same request as over HTTP (headers the channel sent once included).

Streaming stays streaming: after the body, the app's `receive` is the real one (it waits for
the client to disconnect), and an answer is held back only to add `toolReferences` to a
JSON body that arrives in one piece.

An answer marked with toolref headers whose request has an `Origin` (a browser page's) names
them in `Access-Control-Expose-Headers`, after the app's own names (`restoring.exposing`):
a page on another origin reads them whatever CORS sits outside; no CORS allow header is
added. Any other request passes through untouched, and its answer is byte for byte what
the app alone would give. When the registry is down (or refuses the middleware's key), requests
without markers pass through and are answered as protocol 1 (so clients send full payloads);
requests with markers get 409 with every ref missing; edits get 415 (the client sends the
request as it is). Chatting never stops. Each such fallback is counted in
`toolref_middleware_fallbacks_total{reason}`; a registry that is unreachable or refuses the
key is logged once, at start-up (or on the first request when the server runs no lifespan).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Container, Sequence
from typing import Final

from toolref.asgi.budget import SCOPE_KEY, Account, Budget, shared
from toolref.asgi.scope import (
    ASGIApp,
    Disconnected,
    Message,
    Receive,
    Scope,
    Send,
    header_values,
    headers_of,
    read_body,
    replay,
    with_body,
)
from toolref.edits import wire
from toolref.receiving.channel_server import IDLE_SECONDS, serve_channel
from toolref.receiving.held import HeldRequests
from toolref.receiving.hydrator import Hydrated, Hydrator, Outcome, PassThrough, retired
from toolref.receiving.middleware_options import check_app, check_middleware_options
from toolref.receiving.registry_edits import RegistryEdits
from toolref.receiving.restoring import (
    exposing,
    is_edit,
    offers_edits,
    restore_edit,
    told_edits,
)
from toolref.registry.client import AsyncRegistryClient
from toolref.registry.port import Registry
from toolref.wire.encoding import JSON_TYPE, PROBLEM_TYPE, loads_fast
from toolref.wire.errors import (
    ForbiddenError,
    InvalidProtocolError,
    MalformedBodyError,
    ToolrefError,
)
from toolref.wire.headers import PROTOCOL_HEADER, REFERENCES_HEADER
from toolref.wire.models import FormatName
from toolref.wire.protocol import PROTOCOL_REFS, negotiate

log = logging.getLogger(__name__)


_PROTOCOL: Final = PROTOCOL_HEADER.lower().encode()
_REFERENCES: Final = REFERENCES_HEADER.lower().encode()
_HEADER_LIMIT: Final = 8192  # beyond this, refs are not offered in a header (proxies cut long ones)
_VERIFY_SECONDS: Final = 5.0


class ToolRefMiddleware:
    """Hydrate refs in requests and confirm refs in answers; see the module docstring.

    registry: the `AsyncRegistryClient` to hydrate through (its breaker decides when the
        registry is skipped), or any `toolref.registry.port.Registry`.
    messages_keys: where the messages may sit in a request body (the first present wins).
    format: the message format (detected per request when None).
    paths: only requests to these paths are handled (all POST/PUT/PATCH when None).
    max_body_bytes: larger protocol-2 bodies, as sent, are refused with 413.
    max_inflated_bytes: the same for a gzip or zstd body once inflated, and for an edit's
        body once restored (past it, the edit is refused before its body is built: 415,
        and the client sends the request whole, which `max_body_bytes` bounds).
    alter_answers: add `toolReferences` to a JSON answer (held whole for it); False: the
        answer's body is never changed or held, and refs travel only in the
        `Toolref-References` header (the gateway, forwarding a provider's answer).
    offload_bytes: see `toolref.receiving.hydrator.Hydrator` (None: every step on the event loop).
    budget: the bytes of request bodies the process may hold at once, inflated, shared by
        every middleware given it (`toolref.asgi.budget.shared`, 256 MiB, when None); a request
        past it is answered 503 `overloaded` with `Retry-After`, before it costs more. The
        app may close the account in `scope[toolref.asgi.budget.SCOPE_KEY]` once it has sent
        the body on and holds it no more (the gateway does).
    held_bytes: the restored requests held as the next edits' bases (0: none).
    channel_path: where a client's channel is served (`toolref.wire.endpoints.CHANNEL`,
        /v1/channel, where the SDK's `AsyncTransport` asks for it): a WebSocket there carries
        its edits, each served here as an HTTP request (nothing else rides it; an upgrade
        from a browser page, with an `Origin`, is refused). None (the default): no channel,
        edits come over HTTP. Serve one only where this middleware is the outermost that
        checks requests: one wrapped around it sees at most the upgrade (with the client's
        credentials), never the turns, and an HTTP-only one (Starlette's
        `BaseHTTPMiddleware`, FastAPI's `@app.middleware("http")`) not even that. Under a
        mount point (`root_path`: a Starlette `Mount`, a proxy's prefix) the channel is
        served, and told of, below it.
    channel_idle_seconds: a channel with no turn in flight and no frame received for this
        long is closed (1012, `toolref: every turn read was answered`: its sender opens a
        new one at its next turn, failing none), so one left open and silent holds no
        connection for ever; well past the sender's own idle close (60 s).
    """

    def __init__(
        self,
        app: ASGIApp,
        registry: Registry | AsyncRegistryClient,
        *,
        messages_keys: Sequence[str] = ("messages", "input", "contents"),
        format: FormatName | None = None,
        paths: Container[str] | None = None,
        max_body_bytes: int = 32 * 2**20,
        max_inflated_bytes: int = 64 * 2**20,
        alter_answers: bool = True,
        offload_bytes: int | None = None,
        budget: Budget | None = None,
        held_bytes: int = 64 * 2**20,
        channel_path: str | None = None,
        channel_idle_seconds: float = IDLE_SECONDS,
    ) -> None:
        check_app(app)
        check_middleware_options(
            registry=registry,
            messages_keys=messages_keys,
            format=format,
            paths=paths,
            max_body_bytes=max_body_bytes,
            held_bytes=held_bytes,
            channel_path=channel_path,
            channel_idle_seconds=channel_idle_seconds,
            max_inflated_bytes=max_inflated_bytes,
            alter_answers=alter_answers,
            offload_bytes=offload_bytes,
            budget=budget,
        )
        self.app = app
        self.channel_path = channel_path
        self.channel_idle_seconds = float(channel_idle_seconds)
        self.registry = registry
        self.paths = paths
        self.max_body_bytes = max_body_bytes
        self.alter_answers = alter_answers
        self.budget = budget if budget is not None else shared
        if self.budget.limit < max_body_bytes + max_inflated_bytes:
            raise ValueError(
                f"the budget of bodies in flight ({self.budget.limit} bytes) is below what one "
                f"request may hold (max_body_bytes {max_body_bytes} as sent plus "
                f"max_inflated_bytes {max_inflated_bytes}), so such a request could never be "
                "served; pass budget=toolref.asgi.budget.Budget(<a few times that>)"
            )
        self.hydrator = Hydrator(
            registry,
            messages_keys=messages_keys,
            format=format,
            max_inflated_bytes=max_inflated_bytes,
            offload_bytes=offload_bytes,
        )
        self.registry_problem: str | None = None  # what the start-up check found wrong
        self._verified: asyncio.Task[None] | None = None
        self.held = HeldRequests(held_bytes)  # restored requests: the next edits' bases
        # the version of edits told on answers: the registry's, asked at start-up and again
        # after it refused an edit as unreadable (rolled back) or rolled forward
        self.registry_edits = RegistryEdits()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, self._on_startup(receive), send)
            return
        if scope["type"] == "websocket" and self._is_channel(scope):
            # each turn back through here; only edits it restores ride it
            await serve_channel(
                scope, receive, send, self, refuse=_refusal, serves=self._channel_turn,
                idle_seconds=self.channel_idle_seconds,
            )  # fmt: skip
            return
        if not self._handles(scope):
            await self.app(scope, receive, send)
            return
        send = exposing(scope, send)  # outermost: it sees every mark the answer gets
        if offers_edits(scope) or is_edit(scope):  # a registry rolled forward: asked again
            self.registry_edits.due(self.hydrator.registry)
        if offers_edits(scope):
            await self._verify_once()  # which version of edits the registry applies
            scope, send = told_edits(scope, send, self._told_channel(scope), self.edits_version)
        if is_edit(scope):
            with self.budget.account() as account:
                await restore_edit(
                    self.app,
                    self.hydrator.registry,
                    scope,
                    receive,
                    send,
                    account=account,
                    max_body_bytes=self.max_body_bytes,
                    max_restored_bytes=self.hydrator.max_inflated_bytes,
                    problem=_edit_problem,
                    held=self.held,
                    channel=self._told_channel(scope),
                    version=max(self.edits_version, min(wire.VERSIONS)),
                    refused=self._refused,
                )
            return
        if not speaks_refs(scope):
            await self.app(scope, receive, send)
            return
        await self._verify_once()
        with self.budget.account() as account:
            await hydrate_request(
                self.app,
                self.hydrator,
                scope,
                receive,
                send,
                account=account,
                max_body_bytes=self.max_body_bytes,
                alter_answers=self.alter_answers,
            )

    # --- the registry, checked once -----------------------------------------------------

    def _on_startup(self, receive: Receive) -> Receive:
        async def wrapped() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.startup":
                await self._verify_once()
            return message

        return wrapped

    async def _verify_once(self) -> None:
        """At start-up, or before the first request when the server runs no lifespan; requests
        arriving meanwhile wait for the same check."""
        if self._verified is None:
            self._verified = asyncio.ensure_future(self._verify())
        await asyncio.shield(self._verified)

    async def _verify(self) -> None:
        registry = self.hydrator.registry
        try:
            problem = await asyncio.wait_for(registry.verify(), _VERIFY_SECONDS)
        except TimeoutError:
            problem = f"{registry.location} did not answer in time"
        self.registry_problem = problem
        if problem is None:
            await self.registry_edits.start(registry)
        if problem is not None:
            log.error(
                "toolref registry check failed: %s. Until it is fixed, protocol-2 requests "
                "pass to the app as protocol 1 (clients send full payloads); "
                "toolref_middleware_fallbacks_total counts them",
                problem,
            )

    @property
    def edits_version(self) -> int:
        """The version of edits told to clients (`toolref.receiving.registry_edits`)."""
        return self.registry_edits.version

    async def _refused(self, error: ToolrefError) -> None:
        """The registry refused an edit (answered 415): one it could not read (400
        `malformed-body`: rolled back) has its version asked again before that answer."""
        if isinstance(error, MalformedBodyError):
            await self.registry_edits.unreadable(self.hydrator.registry)

    # --- the request --------------------------------------------------------------------

    def _told_channel(self, scope: Scope) -> str | None:
        """The channel's path as a client reaches it (None: none served)."""
        channel = self.channel_path
        return None if channel is None else _mounted(scope, channel)

    def _is_channel(self, scope: Scope) -> bool:
        """A WebSocket to the channel: at `channel_path`, under the app's mount point
        (`root_path`: a Starlette `Mount`, a proxy's prefix) where it has one."""
        channel, path = self.channel_path, scope.get("path")
        return channel is not None and path in (channel, _mounted(scope, channel))

    def _channel_turn(self, scope: Scope) -> ToolrefError | None:
        """Why a channel's turn is not served (None: it is): only an edit this middleware
        restores rides the channel, never a request for the app alone, which would reach
        it past every middleware around this one."""
        if self._handles(scope) and is_edit(scope):
            return None
        return ForbiddenError(
            f"the channel carries edits (application/vnd.toolref.edit) to the paths this "
            f"backend restores, not a request to {scope['path']!r}; send it over HTTP"
        )

    def _handles(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return False
        if self.paths is not None and scope["path"] not in self.paths:
            return False
        return is_edit(scope) or offers_edits(scope) or speaks_refs(scope)


def speaks_refs(scope: Scope) -> bool:
    """The request asks for protocol 2 or later (a header that is no version is not ours to
    judge: the app sees the request as it came)."""
    values = header_values(scope, PROTOCOL_HEADER)
    try:
        return negotiate(",".join(values) if values else None) >= PROTOCOL_REFS
    except InvalidProtocolError:
        return False


async def hydrate_request(
    app: ASGIApp,
    hydrator: Hydrator,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    account: Account,
    max_body_bytes: int,
    alter_answers: bool,
) -> None:
    """One protocol-2 request through `hydrator` to `app`: its body read (within
    `max_body_bytes`), inflated and hydrated, charged to `account` as it grows; a refusal
    answered as a problem; the answer marked with what the client lacks (`alter_answers`:
    refs added to a JSON answer, held whole for it)."""
    try:
        outcome = await _outcome(hydrator, scope, receive, account, max_body_bytes)
    except Disconnected:
        return
    except ToolrefError as exc:
        await _problem(send, exc, PROTOCOL_REFS)
        return
    downstream = with_body(scope, len(outcome.body))
    # An app done with the body (sent on, not held) may close the account early.
    downstream[SCOPE_KEY] = account
    replayed = replay(outcome.body, receive)
    if isinstance(outcome, PassThrough):
        marked = _marked(send, outcome.protocol, None)
    else:
        marked = _marked(send, PROTOCOL_REFS, outcome, hold=alter_answers)
    del outcome  # the body is held by `replayed` alone, until the app takes it
    await app(downstream, replayed, marked)


async def _outcome(
    hydrator: Hydrator, scope: Scope, receive: Receive, account: Account, limit: int
) -> Outcome:
    """The request's body read, inflated and hydrated, charged to `account` as it grows
    (each piece as it arrives, each chunk of inflated output, what the history adds)."""
    headers = headers_of(scope)
    retired(headers)  # before the body is read
    raw = await read_body(receive, limit, "send fewer messages", account)
    body = await hydrator.inflate(raw, headers.get("content-encoding"), account)
    del raw  # a compressed body as sent is not needed once inflated
    return await hydrator.hydrate(body, headers, account)


def _marked(send: Send, protocol: int, outcome: Hydrated | None, *, hold: bool = True) -> Send:
    """Mark the answer with the protocol used and, for protocol 2, what the client lacks.
    Only a successful JSON answer that arrives in one piece is held (with `hold`), to add
    `toolReferences` to it; anything else gets a `Toolref-References` header."""
    references = outcome.references if outcome is not None else {}
    held: Message | None = None

    async def wrapped(message: Message) -> None:
        nonlocal held
        kind = message["type"]
        if kind == "http.response.start":
            headers = [
                (k, v)
                for k, v in message.get("headers", [])
                if k.lower() not in (_PROTOCOL, _REFERENCES)
            ]
            headers.append((_PROTOCOL, str(protocol).encode()))
            message = {**message, "headers": headers}
            if hold and references and message.get("status", 200) < 300 and _is_json(headers):
                held = message
                return
            await send(_with_references_header(message, references))
        elif kind == "http.response.body" and held is not None:
            start, held = held, None
            if message.get("more_body", False):  # streamed: the body is not ours to hold
                await send(_with_references_header(start, references))
                await send(message)
                return
            body = _add_references(message.get("body", b""), references)
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({**message, "body": body})
        else:
            await send(message)

    return wrapped


def _with_references_header(start: Message, references: dict[str, str]) -> Message:
    if not references:
        return start
    header = json.dumps(references, separators=(",", ":")).encode()
    if len(header) > _HEADER_LIMIT:
        return start
    return {**start, "headers": [*start["headers"], (_REFERENCES, header)]}


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    media = b""
    for key, value in headers:
        if key.lower() == b"content-type":
            media = value.split(b";")[0].strip().lower()
        if key.lower() == b"content-encoding" and value.strip().lower() != b"identity":
            return False
    return media == JSON_TYPE.encode()


def _add_references(body: bytes, references: dict[str, str]) -> bytes:
    """`toolReferences` appended to a JSON object body, every other byte as the app wrote
    it; any other body is left alone."""
    stripped = body.rstrip()
    if not stripped.endswith(b"}"):
        return body
    try:
        value = loads_fast(body)  # only whether it is an object matters
    except ValueError:
        return body
    if not isinstance(value, dict):
        return body
    member = b'"toolReferences":' + json.dumps(references, separators=(",", ":")).encode()
    inner = stripped[:-1].rstrip()
    joiner = b"" if inner.endswith(b"{") else b","
    return inner + joiner + member + b"}"


def _mounted(scope: Scope, path: str) -> str:
    """`path` as a client reaches it: under the app's `root_path`, when it has one (as
    the scope's paths are: decoded)."""
    return str(scope.get("root_path", "")).rstrip("/") + path


def _refusal(error: ToolrefError) -> ASGIApp:
    """The answer to a channel's turn refused before it is served (too many at once)."""

    async def refused(scope: Scope, receive: Receive, send: Send) -> None:
        await _edit_problem(send, error)

    return refused


async def _edit_problem(send: Send, error: ToolrefError) -> None:
    await _problem(send, error, PROTOCOL_REFS)


async def _problem(send: Send, error: ToolrefError, protocol: int) -> None:
    body = json.dumps(error.to_problem(), separators=(",", ":")).encode()
    headers = [
        (b"content-type", PROBLEM_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (_PROTOCOL, str(protocol).encode()),
        *((k.lower().encode(), v.encode()) for k, v in error.http_headers().items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
