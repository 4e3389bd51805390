"""`Gateway`: `/llm/{name}/{path}` forwarded to an upstream LLM API, hydrated on the way.

A request to an LLM endpoint toolref knows (`toolref.wire.endpoints.ENDPOINTS`) that
speaks protocol 2 goes through the middleware's per-request pipeline
(`toolref.receiving.middleware.hydrate_request` and a `Hydrator`): its body is checked
against the wire
limit as it arrives, inflated within the inflated limit, and its markers hydrated, all
before the upstream sees it; then `toolref_server.gateway.forwarder.Forwarder`
sends it on and streams the answer back. The upstream receives the body the client's agent
wrote, byte for byte up to the serializer's whitespace, so provider prompt caching keeps
hitting. Everything else passes through, streamed both ways.

The registry it hydrates through is this process's own, called in process through the
registry port (`toolref_server.gateway.inprocess.InProcessRegistry`): the body is parsed once, and
the registry's steps take its messages as they are, with the tenant the `Toolref-Key`
header names (the same authentication, quotas and limits as any client). A request sent as
an edit goes through `toolref_server.gateway.edited`. The answer's body is never changed;
what the client lacks travels in `Toolref-*` headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolref.asgi.budget import Budget
from toolref.asgi.hops import savings_value
from toolref.asgi.scope import Disconnected, header, replay, with_body, with_headers
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.handoff.switch import switched_text
from toolref.receiving.channel_server import serve_channel
from toolref.receiving.hydrator import Hydrator
from toolref.receiving.middleware import hydrate_request, speaks_refs
from toolref.receiving.restoring import exposing
from toolref.wire.endpoints import CHANNEL, GATEWAY, Endpoint, endpoint
from toolref.wire.errors import (
    BadRequestError,
    OverloadedError,
    QuotaExceededError,
    ToolrefError,
)
from toolref.wire.headers import (
    CHANNEL_HEADER,
    EDITS_HEADER,
    SAVINGS_HEADER,
    SWITCHED_FROM_HEADER,
)
from toolref.wire.numbers import describe, whole_number
from toolref_server.context.policy import context_header, wanted
from toolref_server.gateway.context_edits import ContextStep
from toolref_server.gateway.edited import forward_edit, is_edit
from toolref_server.gateway.forwarder import ROUTE_KEY, Forwarder
from toolref_server.gateway.gate import GatewayAdmission
from toolref_server.gateway.inprocess import InProcessRegistry
from toolref_server.gateway.own_answers import Answering, failed
from toolref_server.gateway.sockets import Sockets, refuse
from toolref_server.gateway.upstream_pool import Timeouts, UpstreamPool
from toolref_server.gateway.upstreams import PREFIX
from toolref_server.http.access import AccessMiddleware
from toolref_server.http.problem import problem_response
from toolref_server.metrics import Metrics
from toolref_server.services import Services
from toolref_server.settings import Settings
from toolref_server.usage import Counts

_SAVINGS: Final = SAVINGS_HEADER.lower().encode()
_EDITS: Final = (EDITS_HEADER.lower().encode(), str(EDITS_VERSION).encode())
_CHANNEL: Final = (CHANNEL_HEADER.lower().encode(), CHANNEL.encode())  # where turns may ride
_COUNT_KEY: Final = "toolref.upload"
_ENDPOINT_KEY: Final = "toolref.endpoint"
_SWITCH_KEY: Final = "toolref.switch"  # the scope entry holding the parsed switch header
_CONTEXT_KEY: Final = "toolref.context"  # the request's context editing step (None: none)


@dataclass(frozen=True, slots=True)
class Template:
    """What the access log and metrics label gateway requests with (never the raw path)."""

    path: str = GATEWAY


@dataclass(slots=True)
class _Count:
    """A request's tenant and upstream, its bytes as received, whether all of them were,
    and whether it was sent on (a 409 before that is the gateway's, a resend to come)."""

    tenant: str
    upstream: str
    wire: int = 0
    whole: bool = False
    forwarded: bool = False


class Gateway:
    """ASGI middleware: `/llm/...` requests are the gateway's, the rest go to `app`."""

    def __init__(
        self, app: ASGIApp, settings: Settings, metrics: Metrics, budget: Budget | None = None
    ) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        # Bodies in flight, shared with the registry's REST reader (TOOLREF_MAX_INFLATED_*).
        self.budget = budget or Budget(
            settings.max_inflated_in_flight,
            setting="TOOLREF_MAX_INFLATED_IN_FLIGHT",
            per_tenant=settings.tenant_inflated_limit,
            tenant_setting="TOOLREF_TENANT_INFLATED_IN_FLIGHT",
        )
        self.admission = GatewayAdmission(settings)
        self.forwarder = Forwarder(self._upstream_pool, settings.retry_after_seconds)
        # One pool per upstream name (at most len(TOOLREF_UPSTREAMS)): an upstream that
        # stalls holds its own connections only, never another upstream's.
        self._pools: dict[str, UpstreamPool] = {}
        self._service: ASGIApp | None = None  # the whole app: its services, once started
        self.sockets = Sockets(
            settings,
            self.admission,
            self.budget,
            lambda: self._services().workers,
            metrics=metrics,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._service = scope.get("app", self._service)
            await self.app(scope, self._closing(receive), send)
            return
        if scope["type"] == "websocket" and scope["path"] == CHANNEL:
            self._service = self._service or scope.get("app")
            await self._channel(scope, receive, send)
            return
        if scope["type"] == "websocket" and scope["path"].startswith(PREFIX):
            self._service = self._service or scope.get("app")
            await self.sockets(scope, receive, send)
            return
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        if self._service is None:
            self._service = scope.get("app")
        scope["route"] = Template()
        send = exposing(scope, send)  # a page on another origin reads the toolref headers
        answering = Answering(scope, send)  # its own answers marked too (`own_answers`)
        try:
            await self._forward(scope, receive, answering)
        except ToolrefError as exc:
            await problem_response(exc, for_llm_sdks=True)(scope, receive, answering)
        except Exception:
            if answering.started:
                raise  # too late for a problem answer; the server cuts the connection
            await problem_response(failed(), for_llm_sdks=True)(scope, receive, answering)

    async def _channel(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A channel, once its key and its tenant's channels let it in (`gate`: 401, 429
        answered to the upgrade); each of its turns back through here."""
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return
        try:
            tenant = self.admission.channel(scope)
        except ToolrefError as exc:
            await refuse(send, exc)
            return
        given = False

        async def received() -> Message:
            nonlocal given
            if not given:  # `serve_channel` reads the upgrade itself
                given = True
                return connect
            return await receive()

        try:
            # each turn through the access middleware: its own line and metrics, as over HTTP
            turns = AccessMiddleware(self, self.metrics)
            await serve_channel(
                scope, received, send, turns, refuse=_REFUSE,
                send_timeout=self.settings.send_timeout,
                idle_seconds=self.settings.channel_idle_seconds,
            )  # fmt: skip
        finally:
            self.admission.channels.give(tenant)

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every refusal before anything is read or stored (`gate`), then the switch
        header."""
        with self.admission.admitted(scope, http=True) as admitted:
            found = admitted.route
            at = switch_at(header(scope, SWITCHED_FROM_HEADER))
            upstream = {
                **scope,
                "path": found.path,
                "raw_path": found.raw_path,
                ROUTE_KEY: found,
                _SWITCH_KEY: at,
            }
            llm = endpoint(scope["method"], found.path)
            if is_edit(scope) or llm is not None:
                await self._llm(admitted.tenant, llm, upstream, receive, send)
            else:
                await self.forwarder(upstream, receive, send)

    async def _llm(
        self, tenant: str, llm: Endpoint | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request to an LLM endpoint (or an edit of one), counted for its tenant and
        upstream (`Metrics.gateway_usage`): one request, and a resend when the gateway
        answers it 409 (its client sends it again in full). The bytes of one refused
        before it was sent on (a 409, a 400 `dictionary-mismatch`, a 503
        `store-unavailable`: each sent again) count on the wire too: they came over it."""
        count = _Count(tenant, scope[ROUTE_KEY].name)
        self.metrics.gateway_usage(count.tenant, count.upstream, Counts(requests=1))
        context = self._context(scope, tenant, count.upstream, llm)
        if context is not None:
            send = context.watched(send)

        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                count.wire += len(message.get("body", b""))
                count.whole = not message.get("more_body", False)
            return message

        def refused(status: int) -> None:
            """Its answer (`status`) given before it was sent on: its bytes received."""
            resends = int(status == 409)
            if not count.forwarded and (resends or count.wire):
                self.metrics.gateway_usage(
                    count.tenant, count.upstream, Counts(resends=resends, wire=count.wire)
                )

        async def watched(message: Message) -> None:
            # A hydrated request's refusal (a 409) is answered, not raised: seen on its way
            # out.
            if message["type"] == "http.response.start":
                refused(message["status"])
            await send(message)

        try:
            if is_edit(scope):
                rewrite = None
                if llm is not None and header(scope, SWITCHED_FROM_HEADER) is not None:
                    rewrite = partial(switch_body, llm=llm, at=scope[_SWITCH_KEY])
                await forward_edit(
                    scope,
                    counted,
                    send,
                    services=self._services(),
                    forwarder=self.forwarder,
                    budget=self.budget,
                    tenant=tenant,
                    rewrite=rewrite,
                    context=context,
                )
            elif llm is not None:
                await self._hydrated(count, llm, {**scope, _CONTEXT_KEY: context}, counted, watched)
        except ToolrefError as exc:
            # an edit's base or pieces not held (409), ...: answered by __call__; an edit is
            # counted once applied (`forward_edit`), so one refused is not yet
            refused(exc.status)
            raise

    def _context(
        self, scope: Scope, tenant: str, upstream: str, llm: Endpoint | None
    ) -> ContextStep | None:
        """The request's context editing step, when its policy and its
        `Toolref-Context-Editing` header want one (a wrong header: `BadRequestError`)."""
        if llm is None:
            return None
        policy = self.settings.context_policy.of(upstream, tenant)
        if not wanted(policy, context_header(scope)):
            return None
        services = self._services()
        return ContextStep(
            tenant,
            upstream,
            llm,
            policy,
            services.summaries,
            services.workers,
            self.metrics,
            self.settings.max_containers,  # what a parse of its messages may hold
        )

    async def _hydrated(
        self, count: _Count, llm: Endpoint, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Hydrated in process (a protocol-2 request), then to `_counted_forward`;
        `receive` counts the bytes as they arrive (`_llm`)."""
        tenant = count.tenant
        scope[_COUNT_KEY] = count
        scope[_ENDPOINT_KEY] = llm
        if not speaks_refs(scope):  # a client without toolref: passed on as it is
            await self._counted_forward(scope, receive, send)
            return
        settings = self.settings
        hydrator = Hydrator(
            InProcessRegistry(self._services(), tenant, self.budget),
            messages_keys=(llm.messages_key,),
            format=llm.format,
            max_inflated_bytes=settings.max_decompressed_bytes,
            offload_bytes=settings.offload_bytes,
            workers=self._services().workers,
        )
        with self.budget.account(tenant) as account:
            await hydrate_request(
                self._counted_forward,
                hydrator,
                scope,
                receive,
                send,
                account=account,
                max_body_bytes=settings.max_body_bytes,
                alter_answers=False,
            )

    async def _counted_forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The middleware's app: the upload counted (bytes received, bytes forwarded) and
        told in `Toolref-Savings`, then forwarded. A body the middleware did not read (a
        protocol-1 request) is streamed on as it is: its two sizes are the same."""
        count: _Count = scope[_COUNT_KEY]
        context: ContextStep | None = scope.get(_CONTEXT_KEY)
        switch = header(scope, SWITCHED_FROM_HEADER) is not None
        encoded = (header(scope, "content-encoding") or "identity").strip().lower() != "identity"
        if encoded:  # bytes no step can read: they pass as they came, their encoding named
            switch, context = False, None
        if switch or context is not None:
            try:
                body, receive = await self._readable(count.tenant, receive)
            except Disconnected:
                return
            if body is None:  # too large to edit, or no room: it passes as it came, streamed
                context, switch = None, False
            else:
                if switch:
                    at: int | None = scope[_SWITCH_KEY]
                    llm: Endpoint = scope[_ENDPOINT_KEY]
                    # A parse and a handoff: linear, off the loop when large.
                    body = await self._services().workers.run(
                        self._services().workers.weigh(body), switch_body, body, llm, at
                    )
                if context is not None:
                    body = await context(body)
                scope = with_body(scope, len(body))
                receive = replay(body, receive)
                del body  # held by `receive` alone, until the forwarder sends it on
        raw = _length(scope)
        wire = count.wire if count.whole else raw
        count.forwarded = True
        self.metrics.gateway_usage(count.tenant, count.upstream, Counts(raw=raw, wire=wire))
        saved = None if context is None else context.saved
        told = [(_SAVINGS, savings_value(raw, wire, saved).encode())]
        if context is not None:
            told += context.told()
        if header(scope, EDITS_HEADER) is not None:  # a sender that offers edits: say we read them
            told += (_EDITS, _CHANNEL)
        await self.forwarder(scope, receive, with_headers(send, told))

    async def _readable(self, tenant: str, receive: Receive) -> tuple[bytes | None, Receive]:
        """The request's body whole, to be rewritten (a hydrated one is already; one sent
        as it is is read here, for context editing); or None and a `receive` that gives
        what was read and then the rest, for a body past TOOLREF_MAX_BODY_BYTES or one the
        bodies in flight leave no room for (TOOLREF_MAX_INFLATED_IN_FLIGHT, or the
        tenant's share of it): it passes as it came, as it would without context editing."""
        pieces: list[bytes] = []
        size, limit = 0, self.settings.max_body_bytes
        with self.budget.account(tenant) as account:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise Disconnected
                piece = message.get("body", b"")
                pieces.append(piece)
                if not message.get("more_body", False):
                    return b"".join(pieces), receive
                size += len(piece)
                if size > limit:
                    return None, _replaying(pieces, receive)
                try:
                    account.charge(len(piece))
                except (OverloadedError, QuotaExceededError):
                    return None, _replaying(pieces, receive)

    def _services(self) -> Services:
        services: Services | None = getattr(getattr(self._service, "state", None), "services", None)
        if services is None:
            raise RuntimeError("the gateway runs inside create_app's service, once it started")
        return services

    def _upstream_pool(self, name: str) -> UpstreamPool:
        """The connections to upstream `name` (of TOOLREF_UPSTREAMS), its own."""
        pool = self._pools.get(name)
        if pool is None:
            s = self.settings
            pool = self._pools[name] = UpstreamPool(
                max_connections=s.gateway_max_connections,
                timeouts=Timeouts(s.gateway_connect_timeout, s.gateway_read_timeout),
            )
        return pool

    def _closing(self, receive: Receive) -> Receive:
        """The lifespan's `receive`, closing the upstream pools at shutdown."""

        async def wrapped() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                pools, self._pools = list(self._pools.values()), {}
                for pool in pools:
                    await pool.aclose()
            return message

        return wrapped


_REFUSE: Final = partial(problem_response, for_llm_sdks=True)  # a channel's busy answer


def switch_at(header: str | None) -> int | None:
    """`at` of a `Toolref-Switched-From: <previous upstream>[; at=<n>]` header: how many
    messages came before the switch (None: all of them, or no header). `n` is 1-9 ASCII
    digits, else `BadRequestError`; other parameters are ignored. Bounded: the header is
    within the HTTP layer's head limit, and `n` is converted only when short."""
    if header is None:
        return None
    for option in header.split(";")[1:]:
        name, _, value = option.partition("=")
        if name.strip().lower() != "at":
            continue
        at = whole_number(value.strip(), 9)
        if at is None:
            raise BadRequestError(
                f"{SWITCHED_FROM_HEADER} says at={describe(value.strip())}; send "
                f"`{SWITCHED_FROM_HEADER}: <previous upstream>; at=<n>` with n the count of "
                "messages from before the switch (1-9 digits), or leave `at` out for all"
            )
        return at
    return None


def switch_body(body: bytes, llm: Endpoint, at: int | None) -> bytes:
    """The body for the upstream a conversation switched to
    (`toolref.handoff.switch.switched_text`); `at`: messages from before the switch (None:
    all). Total: a body that is not a JSON object holding its messages in the endpoint's
    format passes as it is."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return body
    rewritten = switched_text(text, llm.format, llm.messages_key, at)
    return body if rewritten is None else rewritten.encode()


def _replaying(pieces: list[bytes], receive: Receive) -> Receive:
    """The request's `pieces` read so far, then the rest from `receive`."""
    held = iter(pieces)

    async def replayed() -> Message:
        piece = next(held, None)
        if piece is None:
            return await receive()
        return {"type": "http.request", "body": piece, "more_body": True}

    return replayed


def _length(scope: Scope) -> int:
    value = header(scope, "content-length")
    return int(value) if value is not None and value.isdigit() else 0
