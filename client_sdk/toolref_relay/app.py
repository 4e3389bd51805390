"""`Relay`: the relay's ASGI app (serve it on loopback; `toolref relay` does).

`/llm/{name}/{path}` goes to `{gateway}/llm/{name}/{path}` (query kept). An LLM request
(`toolref.wire.endpoints`: Anthropic Messages and token counts, OpenAI Chat Completions and
Responses, Gemini generateContent) is read whole and inflated when the agent compressed it.
When the gateway takes edits (`capabilities`), it is sent as an edit of a request of the
same conversation the gateway confirmed (`edited`, with the client's `Editor`); otherwise
as it came. Misses are resent before the agent sees anything. Every other request passes
through, streamed both ways (`passthrough`). An upgrade to a WebSocket (Codex's Responses
WebSocket) is joined to the gateway's (`sockets`), or answered 426 at once. What those
modules need of the relay they get through one narrow object (`link.GatewayLink`), never
the app.

One `Client` (an `Editor`) per upstream and provider credential (`clients`) serves every
conversation that client sends there: it tells conversations apart by their content (least
recently used dropped first), so an agent running several sessions needs nothing more, and
a process without the agent's credential shares nothing with it.

Only requests for the relay's own address are served, none with an `Origin` (`guard`: a
web page, after DNS rebinding); `/metrics`, `/toolref/switch` and `Toolref-Switch` need
this start's control token (`control`).

Never brick a session: a gateway that cannot be reached sends the agent's request, as it
came, to `--fallback`, or answers 502 in the provider's error shape.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Final

import httpx

from toolref import __version__
from toolref.asgi.budget import Account
from toolref.asgi.hops import on_the_wire
from toolref.asgi.scope import Disconnected, Receive, Scope, Send, read_body, while_connected
from toolref.asgi.workers import Workers
from toolref.kit import allocator, collector
from toolref.sending.backoff import FIRST as FIRST_RETRY
from toolref.sending.channel_transport import ChannelTransport
from toolref.sending.editor import Editor
from toolref.wire import redaction
from toolref.wire.endpoints import endpoint
from toolref.wire.errors import (
    LimitExceededError,
    MalformedBodyError,
    OverloadedError,
)
from toolref.wire.shapes import ErrorReply, error_reply, provider_of

from . import control, guard
from .as_edit import OFFLOAD_BYTES, as_edit
from .bodies import TOO_LARGE, Held, declared_too_large, off_the_loop, readable
from .calls import UNREACHABLE, Call, Meter, encoding_of, failed, log_call
from .clients import Client, Clients
from .config import RelayConfig
from .headers import (
    CONTEXT_HEADER,
    SAVINGS_HEADER,
    SWITCH_HEADER,
    Pairs,
    decoded,
    first,
    to_gateway,
    to_provider,
)
from .ledger import (
    Route,
    Tally,
    Upload,
    context_of,
    header_bytes,
    savings_header,
    summary,
    who,
)
from .link import GatewayLink
from .llm import recognise
from .passthrough import pass_through
from .pool import Pool
from .preflight import Preflight
from .preflight import check as check_gateway
from .problems import as_provider_error, not_a_gateway_reply, proxy_error
from .replies import relay_answer, reply_error
from .switch import conversation_of
from .websocket_mode import serve_socket

_ROUTE: Final = re.compile(r"^/llm/([^/]+)(/.*)?$")


def _stderr(line: str) -> None:
    print(redaction.shown(line), file=sys.stderr, flush=True)


class Relay:
    """The relay app; see the module docstring.

    report: where the per-turn lines and the summary go (stderr by default).
    transport: the connection pool to the gateway and the fallback (a new one by default).
    signals: on SIGUSR1, switch to the next `--switch` upstream (the CLI's choice; an app
        served inside tests leaves the process's signals alone).
    preflight: what `toolref relay` found of the gateway before serving (`preflight`);
        None: the app checks at its start, and reports what it found.
    """

    def __init__(
        self,
        config: RelayConfig,
        *,
        report: Callable[[str], None] = _stderr,
        transport: httpx.AsyncBaseTransport | None = None,
        signals: bool = False,
        preflight: Preflight | None = None,
    ) -> None:
        self.config = config
        self.preflight = preflight  # what the start found of the gateway (None: check then)
        self.report = report
        http = None if transport else Pool(preflight.keep_alive if preflight else None)
        pool = transport or http  # the relay's own (`Pool`): no proxy, as the check
        assert pool is not None
        if transport is None and config.channel:  # a given transport is the caller's: kept
            llm_routes = config.gateway.rstrip("/") + "/llm/"  # the turns: to its LLM routes
            pool = ChannelTransport(
                pool,
                config.gateway,
                config.key,
                connect_timeout=config.connect_timeout,
                report=report,
                rides=partial(_rides, llm_routes),
                retry_seconds=min(FIRST_RETRY, config.channel_retry_max),
                longest_retry_seconds=config.channel_retry_max,
            )
        self.link = GatewayLink(config, pool, report, http)
        # the link's parts, by their names (one object each)
        self.pool, self.totals, self.budget = pool, self.link.totals, self.link.budget
        self.switchboard, self.capabilities = self.link.switchboard, self.link.capabilities
        self.clients = Clients(self._new_client, config.max_clients)
        self._signals = signals

    @property
    def tally(self) -> Tally:
        """Every agent's and upstream's turns together (the counters' numbers)."""
        return self.link.tally

    def _new_client(self) -> Client:
        config = self.config
        return Client(
            Editor(config.max_recipes, config.max_recipe_bytes, size_guard=config.size_guard)
        )

    # --- ASGI ---------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await serve_socket(self.link, scope, receive, send)  # WebSocket mode (`sockets`)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        headers = decoded(scope["headers"])
        refused = guard.host_refusal(first(headers, "host"), scope.get("server"))
        refused = refused or guard.origin_refusal(first(headers, "origin"))
        if refused is not None:
            shape = provider_of(path, headers)
            await reply_error(send, error_reply(shape, 403, refused, "toolref_forbidden"))
            return
        if path in control.CONTROL_PATHS:
            config = self.config
            await control.serve(
                control.Request(path, method, headers, config.token, config.token_file),
                receive,
                send,
                self.switchboard,
                self._select,
                check=self._check,
            )
            return
        raw_path = scope.get("raw_path") or path.encode()
        found = _ROUTE.match(raw_path.decode("latin-1"))
        if found is None:  # a base URL without /llm/NAME: 400 in the agent's shape, shown
            message = _NOT_SERVED.format(path=path)  # at once (a 404 reads "model not found")
            shape = provider_of(path, headers)
            await reply_error(send, error_reply(shape, 400, message, "toolref_not_served"))
            return
        dots = guard.path_refusal(found.group(0))
        if dots is not None:  # 400: no retry cures it; nothing forwarded
            shape = provider_of(path, headers)
            await reply_error(send, error_reply(shape, 400, dots, "toolref_bad_path"))
            return
        rest = found.group(2) or "/"
        call = Call(
            method,
            found.group(1),
            rest,
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            provider_of(rest, headers),
        )
        wanted = first(headers, SWITCH_HEADER)
        if wanted:
            name, refused = control.switch_header(wanted, self.config.token, self.config.token_file)
            if refused is not None:
                await reply_error(send, error_reply(call.provider, 403, refused, "toolref_token"))
                return
            try:
                self._select(name)
            except ValueError as exc:
                await reply_error(send, error_reply(call.provider, 400, str(exc), "toolref_switch"))
                return
        if endpoint(method, rest) is not None:
            await self._turn(call, receive, send)
        else:
            await self._pass(call, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        collector.tune()  # a turn must not pay for the size of the cuts remembered
        allocator.tune()  # nor page faults for its body's size (toolref.kit.allocator)
        if self._signals and self.config.switch:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self._cycle)
        if self.preflight is None:
            self.report(await self._probe())

    async def shutdown(self) -> None:
        for whose, tally in self.totals.each.items():
            self.report(summary(whose, tally))
        if self.config.token_file:  # this start's token means nothing once it stops
            control.remove(Path(self.config.token_file), self.config.token)
        await self.pool.aclose()

    async def _check(self) -> dict[str, object]:
        """The gateway checked now, as JSON (`GET /toolref/check`); kept as what is known."""
        await self._probe()
        assert self.preflight is not None
        return {
            "relay": __version__,
            "selected": self.switchboard.selected,
            **self.preflight.shown(),
        }

    async def _probe(self) -> str:
        """A line on the gateway, at start (`preflight`)."""
        config = self.config
        self.preflight = await check_gateway(
            config.gateway,
            config.key,
            switch=config.switch,
            fallback=config.fallback,
            request_timeout=config.connect_timeout,
        )
        self.link.keep_alive(self.preflight.keep_alive)
        return self.preflight.line

    # --- switching ------------------------------------------------------------------------

    def _select(self, name: str) -> None:
        previous = self.switchboard.select(name)
        if previous != name:
            self.report(f"toolref relay: switched from {previous} to {name}")

    def _cycle(self) -> None:
        previous = self.switchboard.selected
        now = self.switchboard.cycle()
        self.report(f"toolref relay: switched from {previous} to {now} (SIGUSR1)")

    # --- LLM requests ---------------------------------------------------------------------

    async def _turn(self, call: Call, receive: Receive, send: Send) -> None:
        # The turn's body bytes, as sent and inflated, on the relay's budget of bodies in
        # flight (--max-inflated-in-flight) until its answer began (`bodies.Held`).
        with self.budget.account() as account:
            await self._turn_within(call, receive, send, account)

    async def _turn_within(
        self, call: Call, receive: Receive, send: Send, account: Account
    ) -> None:
        limits = self.config
        declared = declared_too_large(call.headers, limits.max_body_bytes)
        if declared is not None:  # refused before a `100 Continue` asks for the upload
            too_large = error_reply(call.provider, 413, declared, "toolref_request_too_large")
            await self._refuse(call, send, too_large, 0, [("connection", "close")])
            return
        try:
            raw = await read_body(receive, limits.max_body_bytes, TOO_LARGE, account)
        except Disconnected:
            return
        except LimitExceededError as exc:
            too_large = error_reply(call.provider, 413, exc.detail, "toolref_request_too_large")
            await self._refuse(call, send, too_large, 0)
            return
        except OverloadedError as exc:
            await self._busy(call, send, exc, 0)
            return
        encoding = first(call.headers, "content-encoding")
        content, changed = raw, False
        if readable(encoding):
            try:
                content = await off_the_loop(raw, encoding, limits.max_inflated_bytes, account)
            except OverloadedError as exc:
                await self._busy(call, send, exc, len(raw))
                return
            except LimitExceededError as exc:
                message = f"{exc.detail}; or start the relay with a larger --max-inflated-bytes"
                too_large = error_reply(call.provider, 413, message, "toolref_request_too_large")
                await self._refuse(call, send, too_large, len(raw))
                return
            except MalformedBodyError as exc:
                bad = error_reply(call.provider, 400, exc.detail, "toolref_bad_body")
                await self._refuse(call, send, bad, len(raw))
                return
            changed = content is not raw
        held = Held(raw, content, account)
        del raw, content  # held by `held` alone, let go once the answer began
        await while_connected(self._exchange(call, held, changed, send), receive)

    async def _exchange(self, call: Call, held: Held, changed: bool, send: Send) -> None:
        upstream = self.switchboard.route(call.name)
        media = {
            "content-type": first(call.headers, "content-type") or "",
            "content-encoding": "identity" if changed else encoding_of(call.headers),
        }
        moved = None
        if self.config.switch:  # only switching needs the body read: off the loop if large
            opening = await _PARSERS.run(held.inflated, _opening, call.path, media, held.content)
            if opening is not None:
                conversation, count = opening
                moved = self.switchboard.moved(conversation, upstream, count)
        url = f"{self.config.gateway}/llm/{upstream}{call.suffix()}"
        client = self.clients.client(upstream, call.headers, call.query)
        meter = Meter(self.pool)
        route: Route = "gateway"
        try:
            edited = await as_edit(
                self.link,
                call,
                client,
                url=url,
                body=held.content,
                as_sent=not changed,
                moved=moved,
                meter=meter,
            )
            answer: httpx.Response | ErrorReply
            if edited is not None:
                answer = edited
            else:  # a gateway that takes no edits, or a body that is not one JSON object
                answer = await self._as_it_is(
                    call, url, held.content, changed=changed, moved=moved, meter=meter
                )
            if isinstance(answer, httpx.Response):  # the gateway's own refusal, told
                gateway = self.config.gateway
                answer = (
                    await as_provider_error(answer, call, gateway)
                    or await proxy_error(answer, call, gateway)
                    or answer
                )
            found = self.preflight  # started anyway on a gateway found wrong when it answered
            if isinstance(answer, httpx.Response) and found and found.reached and found.problem:
                answer = await not_a_gateway_reply(answer, call, found.problem)
        except UNREACHABLE as exc:
            answer, route = await self._unreachable(call, held.raw, exc, meter), "fallback"
        except httpx.HTTPError as exc:
            answer = failed(call, self.config.gateway, exc)
        held.let_go()  # the answer began: nothing is resent, its stream holds no body
        if isinstance(answer, ErrorReply) and meter.sent == 0:
            route = "refused"  # nothing went out: the relay answered itself
        status = answer.status if isinstance(answer, ErrorReply) else answer.status_code
        told = answer.headers.get(CONTEXT_HEADER) if isinstance(answer, httpx.Response) else None
        upload = Upload(
            _sent(call, held.sent), held.inflated, meter.sent, route, status, context_of(told)
        )
        extra = [(SAVINGS_HEADER, savings_header(upload))]
        try:
            if isinstance(answer, ErrorReply):
                await reply_error(send, answer, extra)
            else:
                await relay_answer(send, answer, extra)
        finally:  # the turn's line and log once its answer went (or broke off)
            self.link.told(who(call.headers, upstream), upload)
            log_call(call, upstream, status, upload.raw, upload.wire)

    async def _as_it_is(
        self,
        call: Call,
        url: str,
        content: bytes,
        *,
        changed: bool,
        moved: str | None,
        meter: Meter,
    ) -> httpx.Response:
        """The agent's request to the gateway as it came (inflated when `changed`)."""
        headers = to_gateway(
            call.headers,
            key=self.config.key,
            switched_from=moved,
            body_changed=changed,
            context_editing=self.config.context_editing,
        )
        request = httpx.Request(
            "POST",
            url,
            headers=on_the_wire(headers),
            content=content,
            extensions=self.link.extensions(call, url),
        )
        return await meter.handle_async_request(request)

    async def _unreachable(
        self, call: Call, raw: bytes, error: httpx.HTTPError, meter: Meter
    ) -> httpx.Response | ErrorReply:
        """The agent's request as it came, to the fallback; or a 502 saying what to do."""
        fallback = self.config.fallback
        if fallback is None:
            return self.link.gateway_down(call, error)
        request = httpx.Request(
            call.method,
            fallback + call.suffix(),
            headers=on_the_wire(to_provider(call.headers)),
            content=raw,
            extensions=self.link.extensions(call, fallback + call.suffix()),
        )
        try:
            return await meter.handle_async_request(request)
        except httpx.HTTPError as exc:
            return failed(call, fallback, exc, f"; the gateway {self.config.gateway} is down too")

    async def _refuse(
        self, call: Call, send: Send, error: ErrorReply, raw: int, extra: Pairs = ()
    ) -> None:
        upload = Upload(_sent(call, raw), 0, 0, "refused", error.status)
        self.link.told(who(call.headers, call.name), upload)
        await reply_error(send, error, [(SAVINGS_HEADER, savings_header(upload)), *extra])
        log_call(call, call.name, error.status, upload.raw, 0)

    async def _busy(self, call: Call, send: Send, exc: OverloadedError, raw: int) -> None:
        """503 with Retry-After: the turns in flight hold the relay's whole budget."""
        busy = error_reply(call.provider, 503, exc.detail, "toolref_overloaded")
        await self._refuse(call, send, busy, raw, [("retry-after", str(exc.retry_after))])

    async def _pass(self, call: Call, receive: Receive, send: Send) -> None:
        await pass_through(self.link, call, receive, send)


def _rides(llm_routes: str, request: httpx.Request) -> bool:
    """Whether a turn goes over the channel: one to the gateway's LLM routes whose target
    is its URL's (a frame carries `request.url`'s; one the agent sent with a `#`, or what
    httpx escapes, goes over HTTP, which sends it as it came: `Call.exact`)."""
    return str(request.url).startswith(llm_routes) and "target" not in request.extensions


_NOT_SERVED: Final = (
    "toolref relay: this relay serves /llm/{{name}}/... (not {path}): point the agent at "
    "http://127.0.0.1:8760/llm/anthropic (ANTHROPIC_BASE_URL) or .../llm/openai/v1 "
    "(OPENAI_BASE_URL), naming an upstream the gateway knows"
)


def _sent(call: Call, body: int) -> int:
    """What the agent put on the wire for `call`: its header lines and `body` bytes."""
    return header_bytes(call.headers) + body


# Parsing a switched turn's body (about 10 ms a MiB for a conversation of small parts): in
# a worker thread past the size an edit's cut goes there too.
_PARSERS: Final = Workers(None, OFFLOAD_BYTES)


def _opening(path: str, media: dict[str, str], content: bytes) -> tuple[str | None, int] | None:
    """The conversation a switched turn continues and its message count (`switch`); None
    when its body is not an LLM request to read."""
    llm = recognise("POST", path, media, content)
    if llm is None:
        return None
    return conversation_of(llm.body, llm.messages_key), len(llm.body[llm.messages_key])
