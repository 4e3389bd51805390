"""`Link`: one open channel of a sender's (`toolref.sending.channel_transport`): the
frames' memory, the turns in flight on it, and the task reading its answer frames. A turn
is written as one frame and its answer read as its frames come (`Answer`, a stream of
either httpx package, `toolref.registry.packages`: an answer is of its request's package,
and so is what is raised). A turn the channel closed before it went out, or whose
receiver stopped before reading it (`frames.DRAINED`), raises `Unsent`: its caller sends
it over HTTP. Memory: one queue per turn in flight, its answer's pieces not yet read: at
most `frames.WINDOW` bytes where the receiver keeps windows (the gateway and
`ToolRefMiddleware`: the sender grants a turn's bytes back as its caller reads them, so an
answer left unread waits at the receiver, one sent past its window drops the channel); an
older receiver's answers are held as they come.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any, Final

import httpx

from toolref.registry.packages import AsyncByteStream2, packages_of
from toolref.websocket import bases
from toolref.websocket import channel as frames
from toolref.websocket.bases import SenderBases
from toolref.websocket.client import ABNORMAL, REASON_BYTES, Closed
from toolref.websocket.driver import Socket
from toolref.wire.redaction import printable

log = logging.getLogger("toolref.channel")
# An answer's extension: a channel carried it (no proxy in between answered it itself).
CARRIED: Final = "toolref.channel"
# An answer's extension: the bytes of the frame its request went as on the channel (a
# WebSocket message: no header lines); on an answer over HTTP after the channel's busy
# answer, or after the channel's receiver stopped before reading the frame (`Unsent`, its
# `framed`: the whole frame counted, even where its receiver stopped reading part way),
# that frame's bytes too (what a sender counting its wire adds: the relay's `Meter`).
FRAMED: Final = "toolref.channel.framed"
_HOP: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# a turn's at a drained close (`frames.DRAINED`) with no answer frame come: never read
_UNREAD: Final = frames.Answered(-1, frames.BROKEN, b"the channel closed before reading it")


class _Stream:
    """A turn in flight: its answer's frames not yet read, and with windows the bytes of
    its pieces received beyond those granted back (`owed`) and read since the last grant."""

    __slots__ = ("done", "heard", "owed", "queue", "read")

    def __init__(self) -> None:
        self.queue: asyncio.Queue[frames.Answered] = asyncio.Queue()
        self.owed, self.read, self.done = 0, 0, False  # done: its END or BROKEN came
        self.heard = False  # a frame of its answer came

    def received(self, piece: frames.Answered, window: int) -> None:
        """Count a piece come; `FrameError` (the channel dropped) past the window: the
        receiver keeps none, whatever it said."""
        self.owed += len(piece.data)
        if self.owed > window:
            raise frames.FrameError(
                f"stream {piece.stream} was sent {self.owed} bytes beyond those granted "
                f"back, over its window of {window}"
            )


class Link:
    """One open channel: its frames' memory, the turns in flight, the reader."""

    def __init__(self, socket: Socket, clock: Callable[[], float]) -> None:
        self.socket = socket
        self.clock = clock
        self.used = self.opened = clock()  # used: a turn last went out, or a frame came
        named = bases.kept(socket.accepted.headers)  # False: an older receiver
        self.sender = frames.Sender(SenderBases() if named else None)
        self.window = frames.window_kept(socket.accepted.headers)  # None: an older receiver
        self.later: set[asyncio.Task[None]] = set()  # cancel and credit frames on their way
        self.streams: dict[int, _Stream] = {}
        self.next = 0
        self.closed = False
        self.heard, self.answered, self.broke = 0, 0, False  # frames; ENDs; a turn failed
        self.drained = False  # closed by its receiver's stop, every turn it read answered
        self.ours = False  # closed by its sender (idle, retired), not by a failure
        self.retired = False  # takes no new turn; closed once its turns' answers ended
        self.closing = False  # `settle` closes it
        self.over = False  # its turns in flight were told it ended (`_ended`)
        self.said: Closed | None = None  # the close its receiver sent
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
                if self._told_drained():  # its receiver stopped reading it: never read
                    self.drop()
                    raise Unsent("the channel's receiver stopped before reading the turn") from None
                raise self._stuck(request) from None
            first = await self.next_piece(state, request, timeout)
            try:
                status, pairs = first.head()
            except frames.FrameError as exc:  # as an answer that broke off: still served
                self.cancel(stream)
                error: Any = _broke(request)
                raise error(str(exc), request=request) from None
            self.sender.made(stream, status, pairs)
            kept = _without_body(request)  # a stream lasting minutes holds no body
            answer = Answer(self, stream, state, timeout, kept)
            raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]
            return _package(request).Response(
                status,
                headers=raw,
                stream=answer,
                request=kept,
                extensions={CARRIED: True, FRAMED: len(frame)},
            )
        except BaseException as exc:
            self.forget(stream)
            if isinstance(exc, Unsent) and sent:  # went on the wire, unread: it counts
                exc.framed = len(frame)
            if sent and not isinstance(exc, _broke(request)):  # broken: its end came
                self.cancel(stream)  # left before its answer: the receiver stops
            raise

    @property
    def failed(self) -> bool:
        """Closed, not by its sender nor by its receiver's stop (`frames.DRAINED`: a
        restart, the next turn opens a channel at once), having ended no answer or failing a
        turn (`_open`)."""
        failing = not self.answered or self.broke
        return self.closed and not self.ours and not self.drained and failing

    async def next_piece(self, state: _Stream, request: Any, wait: float | None) -> frames.Answered:
        """A turn's next frame (`_next`). A read timeout with no frame come on the channel
        meanwhile, for any turn, ends that turn alone (its caller cancels it: `{"c":1}`) and
        the channel's use: with no other turn's answer still coming it is dropped, as HTTP
        drops a connection a read timed out on (a hung receiver, a connection a NAT dropped
        in use; the next turn opens a new one, or goes over HTTP: `failed`); with one, it
        is retired (`retire`): that answer, whose caller may be reading it on (a model
        reasoning in silence, a caller that read no more for a while), goes on to its end,
        and the next turn opens a new channel. O(turns in flight) at a timeout."""
        before = self.heard
        try:
            return await _next(state.queue, request, wait=wait)
        except _package(request).ReadTimeout:
            if self.heard == before and not self.over:
                if any(s is not state and not s.done for s in self.streams.values()):
                    self.retire()
                else:
                    self.drop()
            raise

    def drop(self) -> None:
        """Drop the connection at once; the channel is closed from now (no turn is written
        on it: the next opens a new one, or goes over HTTP)."""
        self.closed = True
        self.socket.abort()

    def retire(self) -> None:
        """Take no new turn (the next opens a new channel: not a failure) and close once
        every turn in flight has its answer's end (`settle`)."""
        self.closed = self.ours = self.retired = True
        self.settle()

    def forget(self, stream: int) -> None:
        """A turn its caller is done with (read to its end, left, failed)."""
        self.streams.pop(stream, None)
        self.settle()

    def settle(self) -> None:
        """A retired channel whose turns all have their answer's end is closed (in the
        background: the reader may be the one telling). O(turns in flight)."""
        closing = self.retired and not self.over and not self.closing
        if closing and all(s.done for s in self.streams.values()):
            self.closing = True  # closed once
            task = asyncio.get_running_loop().create_task(self.close())
            self.later.add(task)
            task.add_done_callback(self.later.discard)

    def _told_drained(self) -> bool:
        """Whether the close its receiver sent is the drained one (`frames.DRAINED`), read
        already though the reader may not have ended the channel yet (it waits for what is
        being written to go first, `CLOSE_TIMEOUT` at most); `drained` from then on (a turn
        opening meanwhile takes the channel as closed cleanly, not as one that failed)."""
        said = self.said or self.socket.peer_closed
        if said is not None and (said.code, said.reason) == frames.DRAINED:
            self.drained = True
        return self.drained

    def _frame(self, stream: int, target: str, headers: frames.Pairs, body: bytes) -> bytes:
        """The turn's frame, the frames' memory moved on; `Unsent` when the channel closed
        or is closing (nothing of the turn would go out: it goes over HTTP)."""
        if self.closed or not self.socket.open:
            raise Unsent("the channel closed")
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
            if self._told_drained():  # its receiver stopped reading it: never read
                raise Unsent("the channel's receiver stopped before reading the turn") from exc
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
        if self.over or not self.socket.open:  # a retired channel's turns still read on
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
                    self.said = None if message.by_us else message
                    self._told_drained()
                    return
                found = frames.answered(message.data)
                self.used = self.clock()
                self.heard += 1
                self.answered += found.kind == frames.END
                state = self.streams.get(found.stream)
                if state is None:  # a turn the agent left: its pieces dropped
                    continue
                state.heard = True
                state.done = state.done or found.kind in (frames.END, frames.BROKEN)
                if found.kind == frames.PIECE and self.window is not None:
                    state.received(found, self.window)
                state.queue.put_nowait(found)
                if state.done:
                    self.settle()
        except frames.FrameError as exc:  # a receiver that does not speak the channel
            log.warning("channel: closed, an answer frame does not read (%s)", exc)
            self.socket.abort()
        except OSError:
            return
        finally:
            self._ended()

    def _ended(self) -> None:
        """The channel is over: each turn in flight told, once (its queue's last item). A
        turn with no answer frame at a drained close was not read (`send` sends it over
        HTTP); any other unended one fails."""
        if self.over:
            return
        self.closed = self.over = True
        unread = {s for s in self.streams.values() if self.drained and not s.heard}
        self.broke = self.broke or any(
            not s.done and s not in unread for s in self.streams.values()
        )
        gone = frames.Answered(-1, frames.BROKEN, self._gone().encode())
        for state in self.streams.values():
            state.queue.put_nowait(_UNREAD if state in unread else gone)

    def _gone(self) -> str:
        """Why a turn in flight failed as the channel ended: its receiver's close, where
        it sent one (a cap of turns unanswered it passed, a protocol error it saw)."""
        said = self.said
        if said is None or said.code == ABNORMAL:
            return "the channel closed"
        reason = f" {printable(said.reason, REASON_BYTES)}" if said.reason else ""
        return f"the channel closed ({said.code}{reason})"

    async def close(self) -> None:
        self.closed = self.ours = True
        self.reader.cancel()
        # its receiver's drained close read while the reader waited on what was being
        # written: the turns it never read go over HTTP, as the reader would have told them
        self._told_drained()
        # a reader cancelled before it ever ran runs no `finally`: its turns are told here
        self._ended()
        with contextlib.suppress(OSError, ConnectionError):
            await self.socket.close()


def _broke(request: Any) -> type[Exception]:
    """The package's error for an answer that broke off (nothing left to cancel)."""
    error: type[Exception] = _package(request).RemoteProtocolError
    return error


class Unsent(Exception):
    """The channel closed before a turn was written, or its receiver stopped before it read
    the turn (`frames.DRAINED`): it goes over HTTP instead. `framed`: the bytes of its frame
    when that went on the wire (None: nothing did)."""

    framed: int | None = None


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
    if found is _UNREAD:  # nothing was done with it: it goes over HTTP
        raise Unsent("the channel's receiver stopped before reading the turn")
    if found.kind == frames.BROKEN:
        reason = found.data.decode("utf-8", "replace")
        error = _package(request).RemoteProtocolError
        raise error(f"the answer broke off ({reason})", request=request)
    return found


class Answer(httpx.AsyncByteStream, AsyncByteStream2):
    """A turn's answer body, piece by piece as its frames come."""

    def __init__(
        self, link: Link, stream: int, state: _Stream, timeout: float | None, request: Any
    ) -> None:
        self.link, self.stream, self.state = link, stream, state
        self.timeout, self.request = timeout, request
        self.ended = False  # its END or BROKEN came: nothing to cancel

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                found = await self.link.next_piece(self.state, self.request, self.timeout)
                if found.kind == frames.END:
                    self.ended = True
                    return
                if found.kind == frames.PIECE:
                    self.link.taken(self.stream, self.state, len(found.data))
                    yield found.data
        except _broke(self.request):  # BROKEN came, or the channel closed
            self.ended = True
            raise
        except _package(self.request).ReadTimeout:  # this turn alone ends (`next_piece`)
            self.ended = True
            self.link.cancel(self.stream)
            raise
        finally:
            self.link.forget(self.stream)

    async def aclose(self) -> None:
        """The caller is done with the answer: a turn still being answered is cancelled."""
        self.link.forget(self.stream)
        if not self.ended:
            self.ended = True
            self.link.cancel(self.stream)


def _without_body(request: Any) -> Any:
    """`request` as its answer keeps it (its errors name it, its timeouts are read from it):
    without its body, which went out in its frame (a sender's budget of bodies in flight,
    the relay's, gives the body's account back once its answer began)."""
    return _package(request).Request(
        request.method, request.url, headers=request.headers, extensions=request.extensions
    )


def _package(request: Any) -> ModuleType:
    """The httpx package `request` is of (its answer and errors are that package's)."""
    return importlib.import_module(min(packages_of(request) or {"httpx"}))
