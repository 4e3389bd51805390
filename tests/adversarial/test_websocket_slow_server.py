"""The WebSocket client side (`toolref.websocket.driver`, the channel's
`toolref.sending.channel_transport`) against a slow or hostile server: a raw asyncio socket
server scripted byte by byte (no WebSocket library on its side), on loopback.

Found in review: a message fragmented into many small or empty frames held a Python object
and a list slot per frame (about 40 bytes per 4 bytes sent), so `max_message` did not bound
its memory; a refusal whose body never ended was read until the connect timeout and then
reported as "no answer"; a channel a receiver accepted and then dropped, or left silent,
was opened again (or kept) for every turn, each turn failing, never falling back to HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import struct
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import httpx
import pytest

from toolref.sending.backoff import Backoff
from toolref.sending.channel_transport import ChannelTransport
from toolref.websocket import channel as frames
from toolref.websocket.client import Message
from toolref.websocket.driver import Refusal, Unreachable, connect

GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
Talk = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def accept(head: bytes) -> bytes:
    """The 101 answering the upgrade `head`."""
    key = next(
        line.split(b":", 1)[1].strip()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    digest = base64.b64encode(hashlib.sha1(key + GUID).digest())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + digest + b"\r\n\r\n"
    )


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """One unmasked frame, as a server sends it."""
    first = (0x80 if fin else 0) | opcode
    size = len(payload)
    if size < 126:
        return bytes([first, size]) + payload
    if size < 1 << 16:
        return bytes([first, 126]) + struct.pack("!H", size) + payload
    return bytes([first, 127]) + struct.pack("!Q", size) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One masked frame from the client: its opcode and payload."""
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    mask = await reader.readexactly(4)
    data = await reader.readexactly(size)
    return first & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


@contextlib.asynccontextmanager
async def serving(talk: Talk) -> AsyncIterator[tuple[int, list[int]]]:
    """A server on loopback running `talk` per connection: its port, and a list counting
    the connections (upgrades) it took."""
    taken: list[int] = []
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        taken.append(1)
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await talk(reader, writer)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], taken
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await server.wait_closed()


async def test_a_message_of_many_small_or_empty_frames_is_held_in_its_bytes() -> None:
    """100,000 continuation frames of 2 bytes, each followed by an empty one (600 KB sent,
    200 KB of message): before, each frame's piece was an object in a list (5 MB held, and
    empty frames grew it without ever reaching `max_message`); now the message is held as
    its bytes, and read whole when it ends."""
    frames = 100_000
    flooded = asyncio.Event()
    finish = asyncio.Event()

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        writer.write(frame(0x2, b"", fin=False))  # a binary message begins
        chunk = (frame(0x0, b"ab", fin=False) + frame(0x0, b"", fin=False)) * 1000
        for _ in range(frames // 1000):
            writer.write(chunk)
            await writer.drain()
        writer.write(frame(0x9, b"read?"))  # its pong comes once all before it was read
        assert await read_frame(reader) == (0xA, b"read?")
        flooded.set()
        await finish.wait()
        writer.write(frame(0x0, b"!"))
        await writer.drain()
        await reader.read()

    async with serving(talk) as (port, _):
        opened = await connect(f"ws://127.0.0.1:{port}/x", max_message=1 << 20, connect_timeout=10)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            receiving = asyncio.create_task(opened.receive())
            await asyncio.wait_for(flooded.wait(), 60)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        finish.set()
        got = await asyncio.wait_for(receiving, 10)
        opened.abort()
    assert got == Message(b"ab" * frames + b"!")
    assert held < 1_000_000, f"{held} bytes held for a message of {2 * frames} bytes"


async def test_a_text_message_of_empty_and_split_frames_reads_whole() -> None:
    """A text message whose characters are split across frames (a 3-byte character in
    three frames) and whose frames are all empty reads as the text sent."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        euro = "€".encode()
        writer.write(frame(0x1, b"", fin=False) + frame(0x0, b""))  # "" in two frames
        parts = [b"a", euro[:1], euro[1:2], b"", euro[2:] + b"b"]
        writer.write(
            b"".join(frame(0x1 if i == 0 else 0x0, p, fin=False) for i, p in enumerate(parts))
        )
        writer.write(frame(0x0, b""))
        await writer.drain()
        await reader.read()

    async with serving(talk) as (port, _):
        opened = await connect(f"ws://127.0.0.1:{port}/x", max_message=100, connect_timeout=10)
        assert await asyncio.wait_for(opened.receive(), 10) == Message("")
        assert await asyncio.wait_for(opened.receive(), 10) == Message("a€b")
        opened.abort()


async def test_a_refusal_whose_body_never_ends_is_reported_with_its_status_at_once() -> None:
    """A 403 whose body never ends: before, the client read it until the connect timeout
    and then said "no answer to the upgrade" (the relay answered its agent 426 only after
    that wait, naming no status); now `Refusal` with the status and the first
    `max_refusal` bytes of the body as soon as they came."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\r\n")
        while True:
            writer.write(b"x" * 4096)
            await writer.drain()
            await asyncio.sleep(0)

    async with serving(talk) as (port, _):
        with pytest.raises(Refusal) as refused:
            # without the fix: `Unreachable` ("no answer") after the 10 s
            await connect(f"ws://127.0.0.1:{port}/x", max_message=100, connect_timeout=10)
    assert refused.value.status == 403
    assert refused.value.body == b"x" * (64 * 1024)


async def trickle_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    while True:  # a 101 head a byte at a time, never ending
        for byte in b"HTTP/1.1 101 Switching Protocols\r\nX-A: b\r\n":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.001)


async def endless_headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n")
    while True:
        writer.write(b"X-A: " + b"a" * 1000 + b"\r\n")
        await writer.drain()
        await asyncio.sleep(0)


@pytest.mark.parametrize("talk", [trickle_head, endless_headers], ids=["trickled", "endless"])
async def test_an_upgrade_answered_without_end_is_unreachable_within_the_timeout(
    talk: Talk,
) -> None:
    """A 101 head trickled for ever ends at `connect_timeout`; one whose headers never end
    at h11's 16 KiB of head: `Unreachable` either way (the channel goes over HTTP, the relay
    answers 426), the connection dropped, never a hang."""
    async with serving(talk) as (port, _):
        with pytest.raises(Unreachable):
            await asyncio.wait_for(
                connect(f"ws://127.0.0.1:{port}/x", max_message=100, connect_timeout=0.3), 60
            )


async def test_an_upgrade_answer_with_an_oversized_head_says_so_its_limit_and_the_fix() -> None:
    """A 101 whose head runs past h11's 16 KiB (a proxy adding long cookies or tokens):
    before, `Unreachable("the connection ended during the upgrade (Bad HTTP message)")`,
    which sent the reader looking for a dropped connection; now it says the head was too
    large, the limit, and what to change."""
    async with serving(endless_headers) as (port, _):
        with pytest.raises(Unreachable) as raised:
            await connect(f"ws://127.0.0.1:{port}/x", max_message=100, connect_timeout=10)
    said = str(raised.value)
    assert "ended during the upgrade" not in said
    assert "head over 16384 bytes" in said
    assert "fewer or shorter headers" in said


async def test_the_connection_and_the_upgrade_share_one_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`connect_timeout` bounds the connection and the upgrade together, as the driver
    says: the upgrade gets what the connection left of it (it got the whole again: twice
    the timeout at worst)."""
    from toolref.websocket import driver

    given: list[float] = []
    real_wait_for, real_open = asyncio.wait_for, asyncio.open_connection

    async def wait_for(work: Any, timeout: float) -> Any:  # noqa: ASYNC109 - its stand-in
        given.append(timeout)
        return await real_wait_for(work, timeout)

    async def slow_open(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.2)  # a slow connect (TLS, a far host)
        return await real_open(*args, **kwargs)

    monkeypatch.setattr(f"{driver.__name__}.asyncio.wait_for", wait_for)
    monkeypatch.setattr(f"{driver.__name__}.asyncio.open_connection", slow_open)
    async with serving(trickle_head) as (port, _):
        with pytest.raises(Unreachable):
            await connect(f"ws://127.0.0.1:{port}/x", max_message=100, connect_timeout=1)
    connection, upgrade = given
    assert connection == 1
    assert upgrade <= 1 - 0.2


class Http(httpx.AsyncBaseTransport):
    """The HTTP transport beside the channel: answers every request 200, counting them."""

    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return httpx.Response(200, content=b"over http", request=request)


def turn(port: int, read: float = 10.0) -> httpx.Request:
    timeout = {"connect": 10.0, "read": read, "write": 10.0, "pool": 10.0}
    return httpx.Request(
        "POST",
        f"http://127.0.0.1:{port}/v1/messages",
        content=b'{"turn": 1}',
        extensions={"timeout": timeout},
    )


async def outcome(transport: ChannelTransport, request: httpx.Request) -> Any:
    """The answer's body, or the error's type."""
    try:
        answer = await transport.handle_async_request(request)
        return b"".join([piece async for piece in answer.stream])
    except httpx.HTTPError as exc:
        return type(exc)


async def test_a_channel_dropped_before_any_answer_sends_the_next_turns_over_http() -> None:
    """A receiver (or a proxy before it) that accepts the upgrade and drops the connection
    as the turn comes: before, every turn opened a new channel and failed on it, for ever
    (an upgrade a turn, no turn ever served); now the turn that went out fails (it may
    have been acted on: the client retries it), the channel is let be for `retry_seconds`
    and the turns meanwhile go over HTTP, said once."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        writer.transport.abort()

    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        inner = Http()
        transport = ChannelTransport(
            inner, f"http://127.0.0.1:{port}", None, connect_timeout=10, report=told.append
        )
        got = [await outcome(transport, turn(port)) for _ in range(4)]
        await transport.close_link()
    assert got == [httpx.RemoteProtocolError] + [b"over http"] * 3
    assert len(upgrades) == 1
    assert len(inner.sent) == 3
    assert len(told) == 1, told
    assert "closed before any answer" in told[0]


async def test_a_silent_channel_is_dropped_when_a_turn_times_out_on_it() -> None:
    """A receiver that accepts the upgrade, reads every turn and answers none (a hung
    receiver; a connection a NAT dropped in use): before, each turn waited its read timeout
    and failed on the same channel, kept for ever (each turn used it: never idle); now a
    turn timing out with nothing heard on the channel meanwhile drops it, as HTTP drops a
    connection a read timed out on, and the next turns go over HTTP."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        while True:
            await read_frame(reader)

    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        inner = Http()
        transport = ChannelTransport(
            inner, f"http://127.0.0.1:{port}", None, connect_timeout=10, report=told.append
        )
        got = [await outcome(transport, turn(port, read=0.2))]
        link = transport._link
        assert link is not None
        got += [await outcome(transport, turn(port, read=0.2)) for _ in range(2)]
        await asyncio.wait_for(link.reader, 10)  # its reader ended: the connection is gone
        await transport.close_link()
    assert got == [httpx.ReadTimeout, b"over http", b"over http"]
    assert len(upgrades) == 1
    assert link.closed
    assert link.socket._writer.transport.is_closing()
    assert len(told) == 1, told
    assert "closed before any answer" in told[0]


async def test_a_turn_timing_out_leaves_the_other_turns_on_a_silent_channel_their_own_wait() -> (
    None
):
    """Two turns on one channel that hears nothing: the one with the shorter read timeout
    fails `ReadTimeout` as over HTTP, and the other keeps its own wait (a model reasoning in
    silence answers later; over HTTP that request would not fail early either), on a channel
    that takes no new turn (retired: the next opens a new one); the channel is dropped when
    the last turn in flight times out with nothing heard."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        while True:
            await read_frame(reader)

    async with serving(talk) as (port, upgrades):
        transport = ChannelTransport(
            Http(), f"http://127.0.0.1:{port}", None, connect_timeout=10, report=lambda _: None
        )
        short = asyncio.ensure_future(outcome(transport, turn(port, read=0.2)))
        await asyncio.sleep(0)
        long = asyncio.ensure_future(outcome(transport, turn(port, read=2.0)))
        got = [await short]
        link = transport._link
        assert link is not None
        assert link.retired  # the other turn still waits on it
        assert not link.over
        got.append(await long)
        await transport.close_link()
    assert got == [httpx.ReadTimeout, httpx.ReadTimeout]
    assert link.closed
    assert len(upgrades) == 1


async def test_a_receiver_that_always_breaks_channels_is_tried_ever_more_rarely() -> None:
    """A receiver that accepts every upgrade and drops the connection as the turn comes
    (each turn on such a channel fails: it may have been acted on, so it is not resent over
    HTTP): before, a channel was tried again every 30 s for ever, a failed turn each time;
    now the wait doubles after each such channel (with jitter, drawn here at its top), up
    to `longest_retry_seconds`. The clock and the draw are the test's."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        writer.transport.abort()

    now = [1000.0]
    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        inner = Http()
        transport = ChannelTransport(
            inner,
            f"http://127.0.0.1:{port}",
            None,
            connect_timeout=10,
            report=told.append,
            retry_seconds=30,
            longest_retry_seconds=100,
            clock=lambda: now[0],
            random=lambda: 1.0,
        )
        got = []
        for wait in (30, 60, 100, 100):
            got.append(await outcome(transport, turn(port)))  # opens a channel: it breaks
            got.append(await outcome(transport, turn(port)))  # over HTTP: the wait begins
            now[0] += wait - 1
            got.append(await outcome(transport, turn(port)))  # still over HTTP
            now[0] += 1
        await transport.close_link()
    assert got == [httpx.RemoteProtocolError, b"over http", b"over http"] * 4
    assert len(upgrades) == 4
    assert [line.rsplit(" ", 1)[-1] for line in told] == ["30s", "60s", "100s", "100s"]


async def test_a_receiver_that_answers_a_head_then_breaks_every_channel_is_backed_off() -> None:
    """A receiver that answers each channel's first turn with its head and then drops the
    connection (found in review): before, the frame it answered made the channel count as
    one that worked, so every turn opened a new channel at once and failed on it, for ever,
    with no back-off; now a channel that breaks before it lived `healthy` seconds counts as
    a failure in a row (HTTP for the back-off's wait, said), and one that lived that long is
    opened again at once (a receiver restarted)."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        writer.write(frame(0x2, frames.head(0, 200, [])))
        await writer.drain()
        writer.transport.abort()

    now = [1000.0]
    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        inner = Http()
        transport = ChannelTransport(
            inner,
            f"http://127.0.0.1:{port}",
            None,
            connect_timeout=10,
            report=told.append,
            retry_seconds=30,
            clock=lambda: now[0],
            random=lambda: 1.0,
        )
        got = [await outcome(transport, turn(port)) for _ in range(3)]
        now[0] += 30
        got += [await outcome(transport, turn(port)) for _ in range(2)]
        await transport.close_link()
    broke, http = httpx.RemoteProtocolError, b"over http"
    assert got == [broke, http, http, broke, http]  # before: every one `broke`
    assert len(upgrades) == 2
    assert [line.rsplit(" ", 1)[-1] for line in told] == ["30s", "60s"]
    assert "broke" in told[0]


async def test_a_channel_that_lived_healthy_and_broke_is_opened_again_at_once() -> None:
    """A channel that served turns for `healthy` seconds and then broke (a receiver
    restarted) is opened again by the next turn, no back-off."""
    now = [1000.0]

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        writer.write(frame(0x2, frames.head(0, 200, [])) + frame(0x2, frames.end(0)))
        await writer.drain()
        await read_frame(reader)
        now[0] += 300  # the channel served for `healthy` seconds
        writer.write(frame(0x2, frames.head(1, 200, [])))
        await writer.drain()
        writer.transport.abort()

    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        transport = ChannelTransport(
            Http(),
            f"http://127.0.0.1:{port}",
            None,
            connect_timeout=10,
            report=told.append,
            clock=lambda: now[0],
        )
        got = [await outcome(transport, turn(port)) for _ in range(3)]
        await transport.close_link()
    assert got == [b"", httpx.RemoteProtocolError, b""]
    assert len(upgrades) == 2
    assert told == []


async def test_a_receiver_that_ends_one_answer_then_breaks_each_channel_is_backed_off() -> None:
    """A receiver that ends each channel's first answer and then breaks the channel in the
    middle of its second turn (found in review): before, the answer it ended made the
    channel count as one that worked, so the next turn opened a new channel at once and
    every second turn failed, for ever, with no back-off; now a channel that broke a turn
    in flight before it lived `healthy` seconds counts as a failure in a row (HTTP for the
    back-off's wait, said), as one that ended no answer does."""

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        await read_frame(reader)
        writer.write(frame(0x2, frames.head(0, 200, [])) + frame(0x2, frames.end(0)))
        await writer.drain()
        await read_frame(reader)
        writer.write(frame(0x2, frames.head(1, 200, [])))
        await writer.drain()
        writer.transport.abort()

    now = [1000.0]
    told: list[str] = []
    async with serving(talk) as (port, upgrades):
        transport = ChannelTransport(
            Http(),
            f"http://127.0.0.1:{port}",
            None,
            connect_timeout=10,
            report=told.append,
            retry_seconds=30,
            clock=lambda: now[0],
            random=lambda: 1.0,
        )
        got = [await outcome(transport, turn(port)) for _ in range(4)]
        now[0] += 30
        got += [await outcome(transport, turn(port)) for _ in range(4)]
        await transport.close_link()
    broke, http = httpx.RemoteProtocolError, b"over http"
    # before: [b"", broke] * 4, a new channel at once after each break
    assert got == [b"", broke, http, http, b"", broke, http, http]
    assert len(upgrades) == 2
    assert [line.rsplit(" ", 1)[-1] for line in told] == ["30s", "60s"]
    assert "broke" in told[0]


def test_the_channel_s_back_off_draws_its_jitter_and_starts_again_after_a_healthy_channel() -> None:
    """Each wait is drawn between half and all of the doubled one; a channel that lived
    `healthy` seconds with answers on it starts the count again, a shorter one does not."""
    draws = iter([0.0, 1.0, 0.5, 0.0])
    backoff = Backoff(10, 1000, healthy=300, random=lambda: next(draws))
    assert [backoff.failed(0), backoff.failed(0), backoff.failed(0)] == [5.0, 20.0, 30.0]
    assert not backoff.over(29.9)
    assert backoff.over(30)
    backoff.lived(299)
    assert backoff.failures == 3
    backoff.lived(300)
    assert backoff.failed(100) == 5.0
    assert backoff.until == 105.0
    with pytest.raises(ValueError, match="longest_retry_seconds"):
        Backoff(30, 10)
