"""The channel's windows (`toolref.websocket.channel`: flow control per stream): a sender
that asks for them is granted one at the upgrade; the receiver then sends a stream at most
a window of pieces beyond what the sender granted back, while the channel's other turns go
on; a turn left without credit breaks off after the send timeout; a sender that asks for
none (an older one) gets every piece as it comes. The sender grants back half a window at a
time as its caller reads, and drops a channel whose receiver sends past the window."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import httpx
import pytest

from tests.unit.test_channel_sides import HEADERS, UPGRADE, Socket, refuse
from toolref.asgi.scope import ASGIApp, Receive, Scope, Send
from toolref.receiving.channel_server import serve_channel
from toolref.sending.channel_link import Link
from toolref.websocket import channel as frames
from toolref.websocket.client import Accepted, Closed, Message
from toolref.websocket.driver import Socket as DriverSocket

WINDOW = frames.MIN_WINDOW
PIECE = 40 << 10  # past a window in two pieces: one is cut at the window's edge
ASKING: Scope = {
    **UPGRADE,
    "headers": [*UPGRADE["headers"], (frames.WINDOW_HEADER.encode(), str(WINDOW).encode())],
}


def test_a_credit_frame_reads_back_and_nothing_else_reads_as_one() -> None:
    receiver = frames.Receiver()
    assert receiver.turn(frames.Sender.credit(3, 70_000)) == frames.Credit(3, 70_000)
    first = frames.Sender().turn(0, "/v1/messages", HEADERS, b"")  # an empty body: a turn
    assert isinstance(receiver.turn(first), frames.Turn)
    # a turn whose body is a credit's text is still a turn (the meta is what is read)
    assert isinstance(
        receiver.turn(frames.Sender().turn(1, "/v1/x", HEADERS, b'{"w":5}')), frames.Turn
    )


@pytest.mark.parametrize(
    ("asked", "granted"),
    [
        (None, None),
        ("", None),
        ("lots", None),
        ("-5", None),
        ("１２", None),  # full-width digits: not a number of bytes on the wire
        ("99999999999", None),
        ("1", frames.MIN_WINDOW),
        (str(1 << 20), 1 << 20),
        (str(1 << 30), frames.MAX_WINDOW),
    ],
)
def test_the_window_granted_is_the_one_asked_for_within_the_bounds(
    asked: str | None, granted: int | None
) -> None:
    assert frames.window_granted(asked) == granted


def test_a_sender_keeps_only_a_window_granted_as_the_bounds_allow() -> None:
    name = frames.WINDOW_HEADER.encode()
    assert frames.window_kept(()) is None
    assert frames.window_kept(((name, b"65536"),)) == 65536
    assert frames.window_kept(((b"Toolref-Channel-Window", b"1048576"),)) == 1 << 20
    assert frames.window_kept(((name, b"10"),)) is None  # below what any receiver grants
    assert frames.window_kept(((name, str(1 << 30).encode()),)) is None


def streaming(total: int, handed: list[int], failed: list[BaseException]) -> ASGIApp:
    """An app streaming `total` bytes in `PIECE`-sized pieces, counting those `send` took."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            for at in range(0, total, PIECE):
                piece = bytes([at // PIECE % 251]) * min(PIECE, total - at)
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                handed.append(len(piece))
            await send({"type": "http.response.body", "body": b""})
        except OSError as exc:  # as a client gone
            failed.append(exc)
            raise

    return app


def pieces(socket: Socket, stream: int) -> bytes:
    return b"".join(
        a.data for a in socket.answers() if a.stream == stream and a.kind == frames.PIECE
    )


async def until(check: Callable[[], object], rounds: int = 400) -> None:
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never came")


async def test_a_stream_unread_holds_a_window_and_the_channels_other_turns_go_on() -> None:
    socket, handed, failed = Socket(), list[int](), list[BaseException]()
    total = 4 * PIECE
    task = asyncio.create_task(
        serve_channel(
            ASKING, socket.receive, socket.send, streaming(total, handed, failed), refuse=refuse
        )
    )
    sender = frames.Sender()
    socket.frame(sender.turn(0, "/v1/messages", HEADERS, b"{}"))
    await until(lambda: len(pieces(socket, 0)) >= WINDOW)
    await asyncio.sleep(0.05)  # given time, nothing past the window goes
    assert socket.sent[0] == {
        "type": "websocket.accept",
        "headers": [(frames.WINDOW_HEADER.encode(), str(WINDOW).encode())],
    }
    assert len(pieces(socket, 0)) == WINDOW
    # another turn on the same channel goes as far as its own window meanwhile
    socket.frame(sender.turn(1, "/v1/messages", HEADERS, b"{}"))
    await until(lambda: len(pieces(socket, 1)) == WINDOW)
    for windows in range(2, total // WINDOW + 2):  # read on: a window's credit at a time
        socket.frame(frames.Sender.credit(0, WINDOW))
        socket.frame(frames.Sender.credit(1, WINDOW))
        now = min(total, windows * WINDOW)

        def both_sent(now: int = now) -> bool:
            return len(pieces(socket, 0)) == len(pieces(socket, 1)) == now

        await until(both_sent)
    ended = {0, 1}
    await until(lambda: {a.stream for a in socket.answers() if a.kind == frames.END} == ended)
    socket.leave()
    await task
    expected = b"".join(bytes([i % 251]) * PIECE for i in range(4))
    assert pieces(socket, 0) == pieces(socket, 1) == expected  # whole, in order
    assert failed == []


async def test_a_stream_left_without_credit_breaks_off_after_the_send_timeout() -> None:
    socket, handed, failed = Socket(), list[int](), list[BaseException]()
    app = streaming(4 * PIECE, handed, failed)
    task = asyncio.create_task(
        serve_channel(ASKING, socket.receive, socket.send, app, refuse=refuse, send_timeout=0.1)
    )
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await until(lambda: any(a.kind == frames.BROKEN for a in socket.answers()))
    socket.leave()
    await task
    [broken] = [a for a in socket.answers() if a.kind == frames.BROKEN]
    assert broken.data == b"Unread"
    assert len(pieces(socket, 0)) == WINDOW
    assert [type(exc).__name__ for exc in failed] == ["Unread"]  # the app saw a client gone


async def test_a_sender_that_asks_for_no_window_gets_every_piece_as_it_comes() -> None:
    socket, handed, failed = Socket(), list[int](), list[BaseException]()
    total = 4 * PIECE
    task = asyncio.create_task(
        serve_channel(
            UPGRADE, socket.receive, socket.send, streaming(total, handed, failed), refuse=refuse
        )
    )
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await until(lambda: any(a.kind == frames.END for a in socket.answers()))
    socket.leave()
    await task
    assert socket.sent[0] == {"type": "websocket.accept"}
    assert len(pieces(socket, 0)) == total


class Granting:
    """The sender's socket, its receiver having granted `window` (None: an older one)."""

    def __init__(self, window: int | None) -> None:
        granted = () if window is None else ((frames.WINDOW_HEADER.encode(), str(window).encode()),)
        self.accepted = Accepted(granted, None)
        self.open = True
        self.peer_closed: Closed | None = None
        self.sent: list[bytes] = []
        self.incoming: asyncio.Queue[Message | Closed] = asyncio.Queue()

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def receive(self) -> Message | Closed:
        return await self.incoming.get()

    def abort(self) -> None:
        self.open = False
        self.incoming.put_nowait(Closed(1006))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.abort()


def turn() -> httpx.Request:
    timeouts = {"connect": 1.0, "read": 5.0, "write": 5.0, "pool": 1.0}
    return httpx.Request(
        "POST", "http://127.0.0.1:9/v1/messages", content=b"{}", extensions={"timeout": timeouts}
    )


async def answered(socket: Granting) -> tuple[Link, Any]:
    """A channel on `socket`, a turn sent on it, and its answer's head come."""
    link = Link(cast(DriverSocket, socket), lambda: 0.0)
    sending = asyncio.create_task(link.send(turn()))
    await until(lambda: socket.sent)
    socket.incoming.put_nowait(Message(frames.head(0, 200, [])))
    answer = await sending
    return link, answer


async def test_the_sender_grants_back_half_a_window_at_a_time_as_its_caller_reads() -> None:
    socket = Granting(WINDOW)
    link, answer = await answered(socket)
    chunk = WINDOW // 4
    for _ in range(4):
        socket.incoming.put_nowait(Message(frames.piece(0, b"x" * chunk)))
    socket.incoming.put_nowait(Message(frames.end(0)))
    read = [piece async for piece in answer.stream]
    await until(lambda: len(socket.sent) == 3)
    assert sum(map(len, read)) == WINDOW
    receiver = frames.Receiver()
    receiver.turn(socket.sent[0])
    assert [receiver.turn(frame) for frame in socket.sent[1:]] == [
        frames.Credit(0, WINDOW // 2),
        frames.Credit(0, WINDOW // 2),
    ]
    await link.close()


async def test_a_receiver_that_sends_past_the_window_drops_the_channel() -> None:
    socket = Granting(WINDOW)
    link, answer = await answered(socket)
    socket.incoming.put_nowait(Message(frames.piece(0, b"x" * WINDOW)))
    socket.incoming.put_nowait(Message(frames.piece(0, b"x")))  # nothing read, nothing granted
    with pytest.raises(httpx.RemoteProtocolError):
        async for _ in answer.stream:
            pass
    assert not socket.open
    assert link.closed


async def test_an_older_receivers_answer_is_held_as_it_comes_with_no_credit_sent() -> None:
    socket = Granting(None)
    link, answer = await answered(socket)
    for _ in range(4):
        socket.incoming.put_nowait(Message(frames.piece(0, b"x" * WINDOW)))
    socket.incoming.put_nowait(Message(frames.end(0)))
    read = [piece async for piece in answer.stream]
    assert sum(map(len, read)) == 4 * WINDOW
    assert len(socket.sent) == 1  # the turn, no credit
    await link.close()
