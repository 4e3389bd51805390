"""`ChannelTransport`: a sender's turns over one WebSocket to its receiver
(`toolref.websocket.channel`, issue 39), so that a turn costs its edit and a few bytes of
framing instead of an HTTP head; every other request, and every request while the channel
cannot be had, through the transport it wraps. The relay's to the gateway; the SDK's
`AsyncTransport` to a gateway or to a backend's `ToolRefMiddleware`
(`toolref.receiving.channel_server` serves both).

Only the requests `rides` picks and whose body is whole ride the channel (turns and
edits); one still streaming (a pass-through) goes over HTTP. The channel opens on the first
such request (`GET {base}{path}`, `/v1/channel` by default, upgraded; the key, when given,
and the opening request's `credentials` headers at the upgrade) and serves every turn
after it, concurrently, each answer streamed back as it comes. A receiver that refuses the
upgrade (an older one, a backend without a channel, a proxy that does not pass WebSockets)
or cannot be reached leaves the sender on HTTP for `retry_seconds`, then it tries again
(each failure in a row doubling the wait: `toolref.sending.backoff`); a channel that closes
fails the turns in flight on it (as a broken connection would: the client retries) and the
next turn opens a new one, as does a turn after the channel sat idle `IDLE_SECONDS`; one
that takes no frame within a turn's write timeout (a receiver that reads nothing) is
dropped, the turn failing `WriteTimeout` as over HTTP, and so is one whose answer frame does
not read (a text message included), and one on which a turn's read timeout passed with no
frame come for any turn (`ReadTimeout`: a hung receiver, a connection a NAT dropped in use).
A channel closed or dropped before any answer frame came (a proxy that passes the upgrade
and drops what follows), or before it lived `backoff.healthy` seconds with no answer ended
on it or a turn's unended (a receiver that answers a frame, or ends one answer, then breaks
each channel; one restarted between turns is opened again at once), cannot be had: HTTP
for the back-off's wait, said. Memory: one queue per turn in flight, its answer's pieces not
yet read: at most `frames.WINDOW` bytes where the receiver keeps windows (the gateway and
`ToolRefMiddleware`: the sender grants a turn's bytes back as its caller reads them, so an
answer left unread waits at the receiver, one sent past its window drops the channel); an
older receiver's answers are held as they come.

Requests and answers of either httpx package (`toolref.registry.packages`): an answer is of
its request's package, and so is what is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any, Final

import httpx

from toolref.registry.packages import AsyncBaseTransport2, AsyncByteStream2, packages_of
from toolref.sending.backoff import LONGEST, Backoff
from toolref.websocket import channel as frames
from toolref.websocket.client import Closed
from toolref.websocket.driver import Refusal, Socket, Unreachable, connect
from toolref.wire.endpoints import CHANNEL
from toolref.wire.headers import KEY_HEADER

log = logging.getLogger("toolref.channel")
# An answer's extension: a channel carried it (no proxy in between answered it itself).
CARRIED: Final = "toolref.channel"
# An answer's extension: the bytes of the frame its request went as on the channel (a
# WebSocket message: no header lines); on an answer over HTTP after the channel's busy
# answer, that frame's bytes too (what a sender counting its wire adds: the relay's `Meter`).
FRAMED: Final = "toolref.channel.framed"
MAX_MESSAGE: Final = 64 << 20  # bytes of one answer frame
# A channel idle this long is closed before the next turn and a new one opened: a NAT or a
# load balancer may drop an idle connection without a word, and a turn sent on it would
# wait its whole read timeout (httpcore expires an idle connection after 5 s).
IDLE_SECONDS: Final = 60.0
# a request's credentials, repeated on its channel's upgrade (the same origin) for a
# receiver that checks WebSockets at the upgrade; a channel is one set of them
CREDENTIALS: Final = ("authorization", "x-api-key", "api-key", "x-goog-api-key", "toolref-key")
_HOP: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_GONE: Final = frames.Answered(-1, frames.BROKEN, b"the channel closed")
_UNHEARD: Final = "closed before any answer came on it"
_HTTP_FOR: Final = "turns go over HTTP, the channel is tried again in"


class ChannelTransport(httpx.AsyncBaseTransport, AsyncBaseTransport2):
    """See the module docstring. `inner`: the transport to the receiver (and everything
    else); `base`: the receiver's origin (its channel at `base` + `path`); `rides`: which
    requests to it take the channel (default: every POST); `credentials`: headers of the
    request that opens the channel repeated on its upgrade; `report`: told when the channel
    cannot be had; `longest_retry_seconds`: the back-off's cap; `random`: its jitter."""

    def __init__(
        self,
        inner: Any,
        base: str,
        key: str | None,
        *,
        connect_timeout: float,
        report: Callable[[str], None],
        path: str = CHANNEL,
        rides: Callable[[Any], bool] = lambda request: True,
        credentials: tuple[str, ...] = (),
        retry_seconds: float = 30.0,
        longest_retry_seconds: float = LONGEST,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] | None = None,
    ) -> None:
        self.inner = inner
        self.base = base.rstrip("/")
        self.url = self.base + path
        self.rides = rides
        self.credentials = credentials
        self.key = key
        self.connect_timeout = connect_timeout
        self.report = report
        self.backoff = Backoff(retry_seconds, longest_retry_seconds, random=random)
        self.clock = clock
        self._link: _Link | None = None
        self._opening = asyncio.Lock()
        self._retired = False  # closed by its owner: no channel is opened again

    async def handle_async_request(self, request: Any) -> Any:
        if (
            request.method != "POST"
            or not str(request.url).startswith(self.base + "/")
            or not _whole(request)  # a body still streaming
            or not self.rides(request)
            or len(request.content) > frames.MAX_FRAME_BYTES  # past a receiver's message limit
        ):
            return await self.inner.handle_async_request(request)  # not a turn
        link = await self._open(request)
        if link is None or len(link.streams) >= frames.MAX_STREAMS:  # none, or as busy as it serves
            return await self.inner.handle_async_request(request)
        try:
            answer = await link.send(request)
        except _Unsent:  # the channel closed before the turn went out: nothing was sent
            return await self.inner.handle_async_request(request)
        if answer.status_code == 503 and answer.headers.get(frames.BUSY[0]) == frames.BUSY[1]:
            await answer.aclose()  # the receiver did nothing with it (its turns counted on)
            framed = answer.extensions.get(FRAMED)
            answer = await self.inner.handle_async_request(request)
            if framed is not None:  # went on the wire before this one
                answer.extensions[FRAMED] = framed
        return answer

    async def aclose(self) -> None:
        await self.close_link()
        await self.inner.aclose()

    async def close_link(self) -> None:
        """Close the channel for good, not the transport it wraps (its owner's): turns go
        over that one from then on."""
        self._retired = True
        if self._link is not None:
            await self._link.close()

    @property
    def busy(self) -> bool:
        """Whether turns are in flight on its channel."""
        return self._link is not None and not self._link.closed and bool(self._link.streams)

    async def _open(self, request: Any) -> _Link | None:
        link = self._link
        lived = link.used - link.opened if link is not None and link.heard else 0.0
        self.backoff.lived(lived)
        if link is not None and link.closed and link.failed and lived < self.backoff.healthy:
            self._link, wait = None, self.backoff.failed(self.clock())  # cannot be had
            how = f"broke {lived:.0f}s after it opened" if link.heard else _UNHEARD
            self.report(f"toolref: the channel to {self.base} {how}; {_HTTP_FOR} {wait:.0f}s")
            return None
        idle = link is not None and not link.streams and self.clock() - link.used > IDLE_SECONDS
        if link is not None and not link.closed and idle:  # a NAT may have dropped it quietly
            await link.close()
        if self._link is not None and not self._link.closed:
            self._link.used = self.clock()
            return self._link
        if self._retired or not self.backoff.over(self.clock()):
            return None
        async with self._opening:  # one open at a time; those waiting see how it went
            if self._link is not None and not self._link.closed:
                return self._link
            if self._retired or not self.backoff.over(self.clock()):
                return None
            headers = [(frames.WINDOW_HEADER, str(frames.WINDOW))]  # windows, asked for
            headers += [(KEY_HEADER, self.key)] if self.key else []
            headers += [
                (name, value) for name in self.credentials if (value := request.headers.get(name))
            ]  # the opening request's own: a receiver may check them at the upgrade
            try:
                socket = await connect(
                    self.url,
                    headers,
                    max_message=MAX_MESSAGE,
                    connect_timeout=self.connect_timeout,
                    ssl=_tls() if self.url.startswith("https:") else None,
                )
            except (Unreachable, Refusal, OSError, ValueError) as exc:
                wait = self.backoff.failed(self.clock())
                self.report(
                    f"toolref: no channel to {self.base} ({_why(exc)}); {_HTTP_FOR} {wait:.0f}s"
                )
                return None
            if self._retired:  # closed while it connected: nothing would ever close this one
                socket.abort()
                return None
            self._link = _Link(socket, self.clock)
            return self._link


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context httpx's own transport verifies with (certifi's authorities), so the
    channel trusts what the HTTP requests beside it trust."""
    context: ssl.SSLContext = httpx.create_ssl_context()
    return context


def _whole(request: Any) -> bool:
    """Whether `request`'s body is all in memory (not a stream still coming)."""
    try:
        request.content  # noqa: B018  # raises RequestNotRead when it is not
    except Exception:  # httpx's or httpx2's RequestNotRead
        return False
    return True


def _package(request: Any) -> ModuleType:
    """The httpx package `request` is of (its answer and errors are that package's)."""
    return importlib.import_module(min(packages_of(request) or {"httpx"}))


def _why(exc: BaseException) -> str:
    if isinstance(exc, Refusal):
        return f"the upgrade was answered {exc.status}"
    return f"{type(exc).__name__}: {exc}"


class _Stream:
    """A turn in flight: its answer's frames not yet read, and with windows the bytes of
    its pieces received beyond those granted back (`owed`) and read since the last grant."""

    __slots__ = ("done", "owed", "queue", "read")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[frames.Answered] = asyncio.Queue()
        self.owed, self.read, self.done = 0, 0, False  # done: its END or BROKEN came

    def received(self, piece: frames.Answered, window: int) -> None:
        """Count a piece come; `FrameError` (the channel dropped) past the window: the
        receiver keeps none, whatever it said."""
        self.owed += len(piece.data)
        if self.owed > window:
            raise frames.FrameError(
                f"stream {piece.stream} was sent {self.owed} bytes beyond those granted "
                f"back, over its window of {window}"
            )


class _Link:
    """One open channel: its frames' memory, the turns in flight, the reader."""

    def __init__(self, socket: Socket, clock: Callable[[], float]) -> None:
        self.socket = socket
        self.clock = clock
        self.used = self.opened = clock()  # used: a turn last went out, or a frame came
        self.sender = frames.Sender()
        self.window = frames.window_kept(socket.accepted.headers)  # None: an older receiver
        self.later: set[asyncio.Task[None]] = set()  # cancel and credit frames on their way
        self.streams: dict[int, _Stream] = {}
        self.next = 0
        self.closed = False
        self.heard, self.answered, self.broke = 0, 0, False  # frames; ENDs; a turn failed
        self.waiting = 0  # turns waiting for a frame (`next_piece`)
        self.ours = False  # closed by its sender (idle, retired), not by a failure
        self.writing = asyncio.Lock()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def send(self, request: Any) -> Any:
        stream, self.next = self.next, self.next + 1
        state = self.streams[stream] = _Stream()
        headers = [  # as they go on the wire: bytes, read back as latin-1
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in request.headers.raw
            if k.decode("latin-1").lower() not in _HOP
        ]
        target = request.url.raw_path.decode("ascii")
        timeout = timeout_of(request, "read")
        sent = False
        try:
            try:  # the frames' memory changes in the order they are sent
                async with asyncio.timeout(timeout_of(request, "write")), self.writing:
                    frame = self._frame(stream, target, headers, request.content)
                    sent = True  # written before the send's first wait: it goes out
                    await self._write(frame, request)
            except TimeoutError:
                raise self._stuck(request) from None
            first = await self.next_piece(state.queue, request, timeout)
            try:
                status, pairs = first.head()
            except frames.FrameError as exc:  # as an answer that broke off: still served
                self.cancel(stream)
                error: Any = _broke(request)
                raise error(str(exc), request=request) from None
            answer = _Answer(self, stream, state, timeout, request)
            raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]
            return _package(request).Response(
                status,
                headers=raw,
                stream=answer,
                request=request,
                extensions={CARRIED: True, FRAMED: len(frame)},
            )
        except BaseException as exc:
            self.streams.pop(stream, None)
            if sent and not isinstance(exc, _broke(request)):  # broken: its end came
                self.cancel(stream)  # left before its answer: the receiver stops
            raise

    @property
    def failed(self) -> bool:
        """Closed, not by its sender, having ended no answer or failing a turn (`_open`)."""
        return self.closed and not self.ours and (not self.answered or self.broke)

    async def next_piece(
        self, queue: asyncio.Queue[frames.Answered], request: Any, wait: float | None
    ) -> frames.Answered:
        """A turn's next frame (`_next`); a read timeout with no frame come on the
        channel meanwhile, for any turn, drops the channel when no other turn waits on it
        (the next turn opens a new one, or goes over HTTP: `failed`), as HTTP drops a
        connection a read timed out on (a hung receiver, a connection a NAT dropped in use).
        Another turn waiting keeps its own wait (a model reasoning in silence answers later):
        the last to time out drops it."""
        before = self.heard
        self.waiting += 1
        try:
            return await _next(queue, request, wait=wait)
        except _package(request).ReadTimeout:
            if self.heard == before and self.waiting == 1:
                self.drop()
            raise
        finally:
            self.waiting -= 1

    def drop(self) -> None:
        """Drop the connection at once; the channel is closed from now (no turn is written
        on it: the next opens a new one, or goes over HTTP)."""
        self.closed = True
        self.socket.abort()

    def _frame(self, stream: int, target: str, headers: frames.Pairs, body: bytes) -> bytes:
        """The turn's frame, the frames' memory moved on; `_Unsent` when the channel closed
        or is closing (nothing of the turn would go out: it goes over HTTP)."""
        if self.closed or not self.socket.open:
            raise _Unsent("the channel closed")
        return self.sender.turn(stream, target, headers, body)

    def _stuck(self, request: Any) -> Exception:
        """The package's `WriteTimeout` for a turn the channel took no frame of within its
        write timeout; the channel is dropped (its turns fail, the next turn opens a new
        one), as HTTP drops a connection a write timed out on."""
        self.drop()
        error: Any = _package(request).WriteTimeout
        stuck: Exception = error(
            "the channel took no frame within the write timeout; the receiver reads nothing "
            "(raise the request's write timeout if it is only slow)",
            request=request,
        )
        return stuck

    async def _write(self, frame: bytes, request: Any) -> None:
        try:
            await self.socket.send(frame)
        except OSError as exc:  # the socket's own failure, as the request's package says it
            raise _package(request).WriteError(str(exc), request=request) from exc

    def cancel(self, stream: int) -> None:
        """Tell the receiver a turn was left: a cancel frame sent in the background (its
        caller, being cancelled or failing, never waits on the socket for it)."""
        self._later(frames.Sender.cancel(stream))

    def taken(self, stream: int, state: _Stream, size: int) -> None:
        """`size` bytes of a turn's answer were read: with windows, granted back to the
        receiver half a window at a time (a credit frame sent in the background)."""
        if self.window is None:
            return
        state.read += size
        if state.read >= self.window // 2:
            state.owed -= state.read
            self._later(frames.Sender.credit(stream, state.read))
            state.read = 0

    def _later(self, frame: bytes) -> None:
        if self.closed:
            return
        task = asyncio.get_running_loop().create_task(self._send_later(frame))
        self.later.add(task)
        task.add_done_callback(self.later.discard)

    async def _send_later(self, frame: bytes) -> None:
        try:
            async with self.writing:
                await self.socket.send(frame)
        except (OSError, ConnectionError) as exc:  # the channel is going: nothing to tell
            log.debug("channel: a frame not sent (%s)", exc)

    async def _read(self) -> None:
        try:
            while True:
                message = await self.socket.receive()
                if isinstance(message, Closed):
                    return
                found = frames.answered(message.data)
                self.used = self.clock()
                self.heard += 1
                self.answered += found.kind == frames.END
                state = self.streams.get(found.stream)
                if state is None:  # a turn the agent left: its pieces dropped
                    continue
                state.done = state.done or found.kind in (frames.END, frames.BROKEN)
                if found.kind == frames.PIECE and self.window is not None:
                    state.received(found, self.window)
                state.queue.put_nowait(found)
        except frames.FrameError as exc:  # a receiver that does not speak the channel
            log.warning("channel: closed, an answer frame does not read (%s)", exc)
            self.socket.abort()
        except OSError:
            return
        finally:
            self.closed = True
            self.broke = self.broke or any(not s.done for s in self.streams.values())
            for state in self.streams.values():
                state.queue.put_nowait(_GONE)

    async def close(self) -> None:
        self.closed = self.ours = True
        self.reader.cancel()
        with contextlib.suppress(OSError, ConnectionError):
            await self.socket.close()


def _broke(request: Any) -> type[Exception]:
    """The package's error for an answer that broke off (nothing left to cancel)."""
    error: type[Exception] = _package(request).RemoteProtocolError
    return error


class _Unsent(Exception):
    """The channel closed before a turn was written: it goes over HTTP instead."""


def timeout_of(request: Any, kind: str) -> float | None:
    """The request's own timeout of `kind` ("connect", "read"; None: none set)."""
    found: Any = request.extensions.get("timeout", {})
    value = found.get(kind) if isinstance(found, dict) else None
    return float(value) if isinstance(value, int | float) else None


async def _next(
    queue: asyncio.Queue[frames.Answered], request: Any, *, wait: float | None
) -> frames.Answered:
    try:
        found = await asyncio.wait_for(queue.get(), wait)
    except TimeoutError:
        raise _package(request).ReadTimeout(
            "no answer frame within the read timeout", request=request
        ) from None
    if found.kind == frames.BROKEN:
        reason = found.data.decode("utf-8", "replace")
        error = _package(request).RemoteProtocolError
        raise error(f"the answer broke off ({reason})", request=request)
    return found


class _Answer(httpx.AsyncByteStream, AsyncByteStream2):
    """A turn's answer body, piece by piece as its frames come."""

    def __init__(
        self, link: _Link, stream: int, state: _Stream, timeout: float | None, request: Any
    ) -> None:
        self.link, self.stream, self.state = link, stream, state
        self.timeout, self.request = timeout, request
        self.ended = False  # its END or BROKEN came: nothing to cancel

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                found = await self.link.next_piece(self.state.queue, self.request, self.timeout)
                if found.kind == frames.END:
                    self.ended = True
                    return
                if found.kind == frames.PIECE:
                    self.link.taken(self.stream, self.state, len(found.data))
                    yield found.data
        except _broke(self.request):  # BROKEN came, or the channel closed
            self.ended = True
            raise
        finally:
            self.link.streams.pop(self.stream, None)

    async def aclose(self) -> None:
        """The caller is done with the answer: a turn still being answered is cancelled."""
        self.link.streams.pop(self.stream, None)
        if not self.ended:
            self.ended = True
            self.link.cancel(self.stream)
