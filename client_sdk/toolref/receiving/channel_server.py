"""The receiver's side of the channel (`toolref.websocket.channel`, issue 39): one WebSocket
at `GET /v1/channel` carrying a sender's turns (the relay's, the SDK's `AsyncTransport`'s),
each served as the HTTP request it stands for. The gateway serves it, and so does a
backend's `ToolRefMiddleware`.

Each request frame becomes an HTTP scope (the channel's client and server, the frame's
target and headers with its body's length, the upgrade's `Host` where the frame names none)
handed to the app as any request is: the same admission, key, limits, edit and answer.
Its answer goes back as frames on the same socket as it is made (its head, each piece of
its body, its end), so a streamed answer stays a stream; turns are served concurrently, at
most `frames.MAX_STREAMS` at once per channel (a further one is answered 503 at once). The sender
going away cancels every turn still being served, as a client hanging up does; a frame
that does not read closes the channel (1002), the close given up on after
`driver.CLOSE_TIMEOUT` to a sender that reads nothing. A sender that asks for windows
(`frames.WINDOW_HEADER`) gets them: each turn's pieces wait for its credit (`Window`), and
a turn left without credit for `send_timeout` seconds breaks off (`channel_turns.Unread`),
as HTTP drops a client that reads nothing; the channel's other turns go on. Its server stopping
(`STOP_EXTENSION`: a graceful stop) lets the turns in flight finish their answers, answers
any turn sent meanwhile busy (the sender sends it over HTTP), then, as soon as those turns
are answered (not the busy ones', nor the next turn its sender wrote), closes the channel
(`frames.DRAINED`: 1012, saying every turn read was answered, so a turn the sender wrote
meanwhile and got no answer to was never read, and the sender sends it over HTTP); the
server's shutdown timeout bounds that wait, and a channel it cuts short is said in one
warning (not as a crash, with a traceback). A channel with no turn in flight and no frame
received for `idle_seconds` (`IDLE_SECONDS` by default) is closed by the receiver, so one its
sender left open and silent does not hold a connection for ever: `frames.DRAINED` too,
which is as true of it (every turn read was answered) and which a sender takes as a clean
close between turns (its next turn opens a new channel at once; one it wrote as the close
went out was not read, and goes over HTTP).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final
from urllib.parse import unquote

from toolref.asgi.scope import (
    STOP_EXTENSION,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header,
    with_headers,
)
from toolref.receiving.channel_turns import Turns, Window
from toolref.websocket import bases, driver
from toolref.websocket import channel as frames
from toolref.websocket.bases import ReceiverBases
from toolref.websocket.bridge import close_client
from toolref.wire.errors import MalformedRequestError, OverloadedError, ToolrefError

log = logging.getLogger("toolref.channel")
_PROTOCOL_ERROR: Final = 1002


Refuse = Callable[[ToolrefError], ASGIApp]  # the receiver's own answer to a problem
Serves = Callable[[Scope], ToolrefError | None]  # why a turn is not served here (None: it is)
_POLICY_VIOLATION: Final = 1008
# Turns unanswered at once on one channel, busy ones included (not those past their END,
# their app's own work still running), past which the channel is closed (1008, `_PILED`):
# a sender sends at most `frames.MAX_STREAMS`, so one past twice that reads no answer (each
# busy turn waits to write its 503), and its tasks would only pile up.
_MAX_TASKS: Final = 2 * frames.MAX_STREAMS
_PILED: Final = f"toolref: {_MAX_TASKS} turns unanswered, their answers not read"
# Why a turn whose edit names its base by a stream this channel forgot is answered busy (its
# sender sends it over HTTP, the base named by its id: `toolref.websocket.bases`).
_UNHELD: Final = "the stream that made the edit's base is past what this channel remembers"
# The scope extension marking a turn a channel carries (`on_channel`).
TURN_EXTENSION: Final = "toolref.channel_turn"
# Seconds a channel with no turn in flight and no frame received is kept open by default:
# well past the sender's own idle close (`toolref.sending.channel_transport.IDLE_SECONDS`,
# 60 s), so a sender that closes idle channels itself never meets this close.
IDLE_SECONDS: Final = 300.0


async def serve_channel(
    scope: Scope,
    receive: Receive,
    send: Send,
    app: ASGIApp,
    *,
    refuse: Refuse,
    serves: Serves = lambda scope: None,
    send_timeout: float = 30.0,
    idle_seconds: float = IDLE_SECONDS,
) -> None:
    """Accept the WebSocket, then serve each request frame through `app` until the sender
    closes it, or until it sat `idle_seconds` with no turn in flight and no frame received;
    with windows where the sender asks for them (`send_timeout`: how long a turn waits for
    credit). A turn past `frames.MAX_STREAMS` in flight is answered
    `refuse(OverloadedError)`, one `serves` says is not served here `refuse(<its error>)`.
    An upgrade from a browser page (an `Origin` header: no sender of toolref's sends one,
    and a browser applies no CORS to WebSockets) is refused, so no page can drive the
    channel of a local service."""
    if not await _admitted(scope, receive, send):
        return
    window, named = await _accepted(scope, send)
    reader = frames.Receiver(ReceiverBases() if named else None)
    writing = asyncio.Lock()
    gone = asyncio.Event()
    turns = Turns(window, send_timeout)
    stopping, drained = _stop_told(scope, turns)

    async def out(data: bytes) -> None:
        async with writing:  # one frame at a time on the socket
            if not gone.is_set():
                await send({"type": "websocket.send", "bytes": data})

    async def close(why: str, code: int = _PROTOCOL_ERROR, reason: str = "") -> None:
        log.info("channel closed: %s", why)
        gone.set()  # no turn writes after the close
        await _closed(send, writing, code, reason)

    try:
        while True:
            message = await _waited(_next(receive, drained), turns, idle_seconds)
            if isinstance(message, str):  # stopped or idle, no turn left: every turn read
                await close(message, *frames.DRAINED)  # answered; the sender opens its next
                return
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None:
                continue  # text frames are not the channel's: ignored
            try:
                turn = reader.turn(data)
            except frames.FrameError as exc:
                await close(str(exc))
                return
            if isinstance(turn, frames.Cancel):  # its agent left: as a client hanging up
                turns.cancel(turn.stream)
                continue
            if isinstance(turn, frames.Credit):  # its answer read on: send on
                turns.credit(turn)
                continue
            if turn.stream in turns.served:  # one turn a stream: reused, it escapes the bound
                await close(f"stream {turn.stream} reused while served")
                return
            if turns.unanswered >= _MAX_TASKS:  # busy answers it does not read
                await _piled(turns, gone, close)
                return
            full = _busy(turn, turns, stopping)
            if full is not None:  # answered busy, nothing done with it: its body not held
                turn = dataclasses.replace(turn, body=b"")
            turns.start(
                turn,
                _served(
                    scope, turn, app=app, out=out, gone=gone, busy=full, refuse=refuse,
                    serves=serves, window=turns.window(turn.stream),
                    answered=partial(turns.answered, turn.stream),
                    made=partial(reader.made, turn.stream),
                ),
                busy=full is not None,
            )  # fmt: skip
    except asyncio.CancelledError:
        if not _cut_by_stop(stopping, turns):  # its connection's task cancelled otherwise
            raise
    finally:
        gone.set()
        await turns.end()


async def _piled(
    turns: Turns, gone: asyncio.Event, close: Callable[[str, int, str], Awaitable[None]]
) -> None:
    """Close a channel whose turns unanswered reached `_MAX_TASKS` (1008, `_PILED`): its
    turns cancelled first, so their writes, which its sender may never read, let go of the
    socket for the close (its send bounded still: `_closed`)."""
    unanswered = turns.unanswered
    gone.set()
    await turns.end()
    await close(f"{unanswered} turns unanswered", _POLICY_VIOLATION, _PILED)


def _cut_by_stop(stopping: asyncio.Event, turns: Turns) -> bool:
    """Whether a cancellation is its server's stop running out of time (its shutdown
    timeout, or a second stop signal): said in one warning, not raised as a crash."""
    if stopping.is_set():
        log.warning(
            "channel closed: its server stopped before %d turns were answered (their "
            "answers cut; the shutdown timeout ran out, or a second stop signal came)",
            len(turns.answering),
        )
    return stopping.is_set()


async def _admitted(scope: Scope, receive: Receive, send: Send) -> bool:
    """Whether the upgrade is one to serve: not from a browser page (closed unaccepted)."""
    if (await receive())["type"] != "websocket.connect":
        return False
    if any(name == b"origin" for name, _ in scope.get("headers", [])):
        await send({"type": "websocket.close", "code": _POLICY_VIOLATION})
        return False
    return True


async def _accepted(scope: Scope, send: Send) -> tuple[int | None, bool]:
    """Accept the upgrade, granting the window the sender asked for (None: it asked for
    none: no windows on this channel) and bases named by stream where it asked for them."""
    window = frames.window_granted(header(scope, frames.WINDOW_HEADER))
    named = bases.granted(header(scope, bases.HEADER))
    granted = [] if window is None else [(frames.WINDOW_HEADER.encode(), str(window).encode())]
    granted += [(bases.HEADER.encode(), bases.OFFER.encode())] if named else []
    if granted:
        await send({"type": "websocket.accept", "headers": granted})
    else:
        await send({"type": "websocket.accept"})
    return window, named


async def _next(receive: Receive, drained: asyncio.Task[None] | None) -> Message | None:
    """The sender's next message; None once `drained` (its server stopped and every turn
    it served has its answer ended), then at once: a sender sending turns as fast as they
    are answered busy would otherwise keep the channel open until the stop's timeout cut
    it, and every turn on it with it."""
    if drained is None:
        return await receive()
    if drained.done():
        return None  # what the sender wrote since is not read: it goes over HTTP
    message = asyncio.ensure_future(receive())
    try:
        await asyncio.wait({message, drained}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not message.done():
            message.cancel()  # a queue's get: nothing taken
    if message.done() and not message.cancelled():
        return message.result()
    return None


async def _waited(
    message: Coroutine[Any, Any, Message | None], turns: Turns, idle_seconds: float
) -> Message | str:
    """`message` (the sender's next, None once drained: `_next`), or why the channel is to
    be closed (`DRAINED`): its server stops, or no turn was served for `idle_seconds`,
    counted from now when none is, else from when the last of them ends (no turn starts
    meanwhile: only a frame starts one). Giving the wait up takes nothing (a queue's get,
    as in `_next`). O(1): a timer armed only while no turn is served."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(None) as idle:
            turns.quiet = lambda: idle.reschedule(loop.time() + idle_seconds)
            if not turns.served:
                turns.quiet()
            found = await message
    except TimeoutError:
        if idle.expired():
            return f"idle {idle_seconds:g}s with no turn in flight"
        raise
    finally:
        turns.quiet = None
    return "its server stops" if found is None else found


def _stop_told(scope: Scope, turns: Turns) -> tuple[asyncio.Event, asyncio.Task[None] | None]:
    """Set when the channel's server stops (`STOP_EXTENSION`), and the task that ends once it
    did and no turn is served (None: a server that closes the socket itself at its stop)."""
    stopping = asyncio.Event()
    stop = (scope.get("extensions") or {}).get(STOP_EXTENSION)
    if not isinstance(stop, dict):
        return stopping, None
    stop["on_stop"] = stopping.set
    turns.drained = asyncio.create_task(_drained(stopping, turns))
    return stopping, turns.drained


async def _drained(stopping: asyncio.Event, turns: Turns) -> None:
    """Once `stopping` is set and every turn served has its answer ended (what a turn's app
    does after it, a write, is cancelled with the channel, as on any close). A turn answered
    busy is not waited for: nothing was done with it, and its sender sends it over HTTP
    whether its 503 or the close comes first."""
    await stopping.wait()
    while turns.answering:
        turns.empty.clear()
        await turns.empty.wait()


async def _closed(
    send: Send, writing: asyncio.Lock, code: int = _PROTOCOL_ERROR, reason: str = ""
) -> None:
    """`code` (1002 by default) and `reason` to the sender, given at most `driver.CLOSE_TIMEOUT`
    for the socket's one writer (a turn's write to a sender that reads nothing holds it for
    ever) and as long again for the close itself (`close_client`): the channel's task ends
    either way."""
    try:
        await asyncio.wait_for(writing.acquire(), driver.CLOSE_TIMEOUT)
    except TimeoutError:  # busy for good: its server drops it as the channel returns
        log.info("channel's sender read nothing for %gs: no close", driver.CLOSE_TIMEOUT)
        return
    try:
        await close_client(send, code, reason)
    finally:
        writing.release()


async def _served(
    channel: Scope,
    turn: frames.Turn,
    *,
    app: ASGIApp,
    out: Callable[[bytes], Awaitable[None]],
    gone: asyncio.Event,
    busy: str | None,
    refuse: Refuse,
    serves: Serves,
    window: Window | None,
    answered: Callable[[], None],
    made: Callable[[int, frames.Pairs], None],
) -> None:
    """One turn through `app`, its answer as frames (`out`), its pieces within `window`
    where there is one; a turn that cannot be served (its scope not made, the app ending
    without a whole answer, its answer left unread, a fault) breaks off."""
    stream = turn.stream
    ended = False

    async def send(message: Message) -> None:
        nonlocal ended
        if message["type"] == "http.response.start":
            given = message.get("headers", [])  # optional in ASGI
            pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in given]
            made(message["status"], pairs)  # before the sender can read it
            await out(frames.head(stream, message["status"], pairs))
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            at = 0
            while at < len(body):  # O(len(body)): a copy per piece a window lets go
                size = len(body) - at if window is None else await window.take(len(body) - at)
                await out(frames.piece(stream, body[at : at + size]))  # whole: not copied
                at += size
            if not message.get("more_body", False):
                ended = True
                await out(frames.end(stream))
                answered()

    try:
        bad = frames.unsendable(turn)  # refused below, its scope made of the channel's alone
        scope = _scope(channel, turn if bad is None else _bare(turn))
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": turn.body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        why = _unserved(stream, bad, busy) or serves(scope)
        if why is None:
            await app(scope, receive, send)
        else:  # a busy turn: nothing done with it, its sender sends it over HTTP
            marked = busy is not None and bad is None
            await refuse(why)(scope, receive, _marked_busy(send) if marked else send)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the answer broke off: the sender's request fails, as on HTTP
        if ended:  # answered whole before the app raised (its error answered for it)
            log.warning("channel turn %d: the app raised after its answer: %r", stream, exc)
            return
        log.warning("channel turn %d broke off: %s", stream, type(exc).__name__)
        with contextlib.suppress(Exception):  # the socket itself may be what failed
            await out(frames.broken(stream, type(exc).__name__))
        return
    if not ended:  # the app returned without a whole answer: as a connection dropped
        log.warning("channel turn %d broke off: the app ended without a whole answer", stream)
        await out(frames.broken(stream, "unfinished"))


def _busy(turn: frames.Turn, turns: Turns, stopping: asyncio.Event) -> str | None:
    """Why `turn` is answered busy, nothing done with it (its sender sends it over HTTP):
    this receiver stopping, no room for it, or its edit's base named by a stream this
    channel forgot; None: it is served."""
    if stopping.is_set():
        return "this receiver is stopping"
    return turns.full(turn) or (_UNHELD if turn.unheld else None)


def _unserved(stream: int, bad: str | None, busy: str | None) -> ToolrefError | None:
    """Why a turn is answered by the receiver itself: a head no HTTP request could carry
    (`bad`, as an HTTP server refuses it), no room for it (`busy`); None: neither."""
    if bad is not None:
        return MalformedRequestError(
            f"the channel's turn {stream} cannot be sent as an HTTP request: {bad}; send "
            "each header as one line of visible latin-1 characters"
        )
    if busy is not None:
        return OverloadedError(f"{busy}; retry after 1s", retry_after=1)
    return None


def _marked_busy(send: Send) -> Send:
    """`send`, its head saying the channel was too busy for the turn (`frames.BUSY`): the
    sender sends that turn over HTTP instead, where nothing was done with it."""
    return with_headers(send, [(frames.BUSY[0].lower().encode(), frames.BUSY[1].encode())])


def _bare(turn: frames.Turn) -> frames.Turn:
    """`turn` with no headers and the target `/`: what its refusal's scope is made of."""
    return dataclasses.replace(turn, target="/", headers=[])


def _scope(channel: Scope, turn: frames.Turn) -> Scope:
    """The HTTP scope of a turn: the frame's target (its path decoded, as a server decodes
    it) and headers, its body's length, the channel's connection. What a proxy in front
    sets (`Host`, `Forwarded`, `X-Forwarded-*`, `X-Real-IP`, `Via`) is the upgrade's, never the
    frame's, which passed no proxy. A turn `frames.unsendable` refuses is served as its
    `_bare` self (a header beyond latin-1 would not encode)."""
    raw, _, query = turn.target.partition("?")
    headers = [
        (k.lower().encode("latin-1"), v.encode("latin-1"))
        for k, v in turn.headers
        if not _proxied(k.lower().encode("latin-1"))
    ]
    headers[:0] = [(k, v) for k, v in channel.get("headers", []) if _proxied(k)]
    headers.append((b"content-length", str(len(turn.body)).encode()))
    return {
        "type": "http",
        "asgi": channel.get("asgi", {"version": "3.0"}),
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https" if channel.get("scheme") == "wss" else "http",
        "path": unquote(raw),
        "raw_path": raw.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": channel.get("root_path", ""),
        "headers": headers,
        "client": channel.get("client"),
        "server": channel.get("server"),
        "state": dict(channel.get("state", {})),
        "app": channel.get("app"),
        "extensions": {TURN_EXTENSION: {}},
    }


def on_channel(scope: Scope) -> bool:
    """Whether `scope` is a turn a channel carries (`_scope`): the sender's next turn on
    that channel comes to this same process, while its socket lives."""
    return TURN_EXTENSION in (scope.get("extensions") or {})


def _proxied(name: bytes) -> bool:
    """A header a proxy in front sets or rewrites (lowercase name)."""
    return name in _PROXIED or name.startswith(b"x-forwarded-")


_PROXIED: Final = frozenset({b"host", b"forwarded", b"x-real-ip", b"via"})
