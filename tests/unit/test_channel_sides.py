"""The channel's two sides, in process: the receiver's (`toolref.receiving.channel_server`,
the gateway's and `ToolRefMiddleware`'s) driven as an ASGI server drives it, and the SDK
sender's bookkeeping (`toolref.sending.channels.Channels`).

The receiver refuses an upgrade from a browser page, closes a channel whose sender reuses
a stream still served (the bound on turns in flight holds), answers a turn it does not
serve with its refusal (the app never sees it), breaks off a turn whose app ends without
a whole answer, and gives every turn the upgrade's `Host`. The sender keeps a channel per
origin, path and credentials, learnt per endpoint, for edits only, and a bounded number."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toolref.asgi.scope import ASGIApp, Message, Receive, Scope, Send
from toolref.edits.wire import MEDIA_TYPE
from toolref.kit.varints import varint
from toolref.receiving.channel_server import serve_channel
from toolref.sending import channel_link
from toolref.sending import channels as channels_module
from toolref.sending.channel_transport import ChannelTransport
from toolref.sending.channels import Channels
from toolref.websocket import channel as frames
from toolref.wire.errors import ForbiddenError, ToolrefError
from toolref.wire.headers import CHANNEL_HEADER, EDITS_HEADER

HEADERS = [("content-type", MEDIA_TYPE), ("authorization", "Bearer k")]
UPGRADE: Scope = {
    "type": "websocket",
    "path": "/v1/channel",
    "headers": [(b"host", b"backend.example:8001")],
    "client": ("127.0.0.1", 5),
    "server": ("127.0.0.1", 8001),
}


class Socket:
    """The server side of a WebSocket as ASGI hands it over: frames in, messages out."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[Message] = asyncio.Queue()
        self.sent: list[Message] = []
        self.closed = asyncio.Event()
        self.incoming.put_nowait({"type": "websocket.connect"})

    def frame(self, data: bytes) -> None:
        self.incoming.put_nowait({"type": "websocket.receive", "bytes": data})

    def leave(self) -> None:
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": 1000})

    async def receive(self) -> Message:
        return await self.incoming.get()

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "websocket.close":
            self.closed.set()

    def answers(self) -> list[frames.Answered]:
        return [frames.answered(m["bytes"]) for m in self.sent if m["type"] == "websocket.send"]


def refuse(error: ToolrefError) -> ASGIApp:
    async def refused(scope: Scope, receive: Receive, send: Send) -> None:
        body = json.dumps(error.to_problem()).encode()
        await send({"type": "http.response.start", "status": error.status, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return refused


def answering(seen: list[Scope]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def serving(
    socket: Socket,
    app: ASGIApp,
    scope: Scope = UPGRADE,
    serves: Callable[[Scope], ToolrefError | None] = lambda scope: None,
) -> asyncio.Task[None]:
    task = asyncio.create_task(
        serve_channel(scope, socket.receive, socket.send, app, refuse=refuse, serves=serves)
    )
    await asyncio.sleep(0)
    return task


async def settled(socket: Socket, count: int) -> None:
    for _ in range(200):
        if len(socket.answers()) >= count or socket.closed.is_set():
            return
        await asyncio.sleep(0.005)


async def test_a_turn_is_served_with_the_upgrades_host_whatever_the_frame_says() -> None:
    socket, seen = Socket(), list[Scope]()
    task = await serving(socket, answering(seen))
    socket.frame(frames.Sender().turn(0, "/v1/messages", [*HEADERS, ("host", "evil")], b"{}"))
    await settled(socket, 3)
    socket.leave()
    await task
    [scope] = seen
    hosts = [v for k, v in scope["headers"] if k == b"host"]
    assert hosts == [b"backend.example:8001"]
    assert [a.kind for a in socket.answers()] == [frames.HEAD, frames.PIECE, frames.END]


async def test_an_upgrade_from_a_browser_page_is_refused() -> None:
    socket, seen = Socket(), list[Scope]()
    scope = {**UPGRADE, "headers": [*UPGRADE["headers"], (b"origin", b"https://evil.example")]}
    task = await serving(socket, answering(seen), scope)
    await task
    assert socket.sent == [{"type": "websocket.close", "code": 1008}]
    assert seen == []


async def test_a_turn_the_receiver_does_not_serve_is_refused_before_the_app() -> None:
    socket, seen = Socket(), list[Scope]()
    task = await serving(
        socket, answering(seen), serves=lambda scope: ForbiddenError("not on the channel")
    )
    socket.frame(frames.Sender().turn(0, "/admin", HEADERS, b"{}"))
    await settled(socket, 3)
    socket.leave()
    await task
    assert seen == []
    head, *_ = socket.answers()
    assert head.head()[0] == 403


async def test_a_stream_reused_while_served_closes_the_channel() -> None:
    socket, started, cancelled = Socket(), asyncio.Event(), asyncio.Event()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = await serving(socket, slow)
    sender = frames.Sender()
    socket.frame(sender.turn(7, "/v1/messages", HEADERS, b"{}"))
    await asyncio.wait_for(started.wait(), 5)
    socket.frame(sender.turn(7, "/v1/messages", HEADERS, b"{}"))
    await asyncio.wait_for(task, 5)
    assert socket.sent[-1] == {"type": "websocket.close", "code": 1002, "reason": ""}
    await asyncio.wait_for(cancelled.wait(), 5)  # the turn in flight does not outlive it


async def test_an_app_that_ends_without_a_whole_answer_breaks_the_turn_off() -> None:
    socket = Socket()

    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    task = await serving(socket, silent)
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await settled(socket, 2)
    socket.leave()
    await task
    assert [a.kind for a in socket.answers()] == [frames.HEAD, frames.BROKEN]


def request(url: str, *, edit: bool = True, key: str = "k") -> httpx.Request:
    media = MEDIA_TYPE if edit else "application/json"
    return httpx.Request(
        "POST", url, content=b"{}", headers={"content-type": media, "authorization": key}
    )


def told(path: str | None, *, receiver: bool = True) -> httpx.Response:
    """A receiver's answer (`Toolref-Edits`) naming its channel at `path` (None: none)."""
    headers = {EDITS_HEADER: "4"} if receiver else {}
    return httpx.Response(200, headers={**headers, **({CHANNEL_HEADER: path} if path else {})})


class Inner:
    async def aclose(self) -> None:
        return None


async def test_a_sender_keeps_a_channel_per_endpoint_told_and_per_credentials() -> None:
    channels, inner = Channels(lambda line: None), Inner()
    chat, other = "http://b:1/v1/chat/completions", "http://b:1/api/v1/messages"
    assert await channels.sender(inner, request(chat)) is inner  # not told yet
    channels.told(request(chat), told("/v1/channel"))
    channels.told(request(other), told(None))
    channels.told(request("http://b:1/x"), told("not a path"))
    first = await channels.sender(inner, request(chat))
    assert isinstance(first, ChannelTransport)
    assert first.url == "http://b:1/v1/channel"
    assert await channels.sender(inner, request(chat)) is first
    assert await channels.sender(inner, request(chat, key="other")) is not first
    assert await channels.sender(inner, request(chat, edit=False)) is inner  # edits only
    assert await channels.sender(inner, request(other)) is inner  # its endpoint told none
    assert await channels.sender(inner, request("http://b:1/x")) is inner
    await channels.aclose()
    assert channels.open == {}


async def test_a_sender_keeps_a_bounded_number_of_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(channels_module, "MAX_CHANNELS", 3)
    monkeypatch.setattr(channels_module, "MAX_ENDPOINTS", 4)
    channels, inner = Channels(lambda line: None), Inner()
    for n in range(10):
        url = f"http://b{n}:1/v1/messages"
        channels.told(request(url), told("/v1/channel"))
        made: Any = await channels.sender(inner, request(url))
        assert isinstance(made, ChannelTransport)
    assert len(channels.open) == 3
    assert len(channels.paths) == 4


async def test_what_a_proxy_sets_is_the_upgrades_and_the_path_is_decoded() -> None:
    socket, seen = Socket(), list[Scope]()
    upgrade = {
        **UPGRADE,
        "headers": [*UPGRADE["headers"], (b"x-forwarded-for", b"10.0.0.7")],
    }
    task = await serving(socket, answering(seen), upgrade)
    spoofed = [*HEADERS, ("X-Forwarded-For", "1.2.3.4"), ("forwarded", "for=1.2.3.4")]
    socket.frame(frames.Sender().turn(0, "/v1/my%20dep/messages?x=1", spoofed, b"{}"))
    await settled(socket, 3)
    socket.leave()
    await task
    [scope] = seen
    names = [k for k, _ in scope["headers"]]
    assert (b"x-forwarded-for", b"10.0.0.7") in scope["headers"]
    assert b"forwarded" not in names
    assert names.count(b"x-forwarded-for") == 1
    assert scope["path"] == "/v1/my dep/messages"
    assert scope["raw_path"] == b"/v1/my%20dep/messages"
    assert scope["query_string"] == b"x=1"


async def test_a_turn_carries_its_own_headers_never_the_upgrades_or_another_turns() -> None:
    """Each turn is its own tenant's and agent's: the key and credentials the channel was
    opened with never reach a turn, and a turn's headers replace the turn before's whole
    (one that lacks the key or a credential the turn before carried is served without)."""
    socket, seen = Socket(), list[Scope]()
    upgrade = {
        **UPGRADE,
        "headers": [*UPGRADE["headers"], (b"toolref-key", b"key-a"), (b"x-api-key", b"sk-a")],
    }
    task = await serving(socket, answering(seen), upgrade)
    sender = frames.Sender()
    first = [("content-type", MEDIA_TYPE), ("toolref-key", "key-b"), ("x-api-key", "sk-b")]
    socket.frame(sender.turn(0, "/llm/up/v1/messages", [("content-type", MEDIA_TYPE)], b"{}"))
    socket.frame(sender.turn(1, "/llm/up/v1/messages", first, b"{}"))
    socket.frame(sender.turn(2, "/llm/up/v1/messages", [("content-type", MEDIA_TYPE)], b"{}"))
    await settled(socket, 9)
    socket.leave()
    await task
    named = [
        {k: v for k, v in scope["headers"] if k in (b"toolref-key", b"x-api-key")}
        for scope in sorted(seen, key=lambda scope: len(scope["headers"]))
    ]
    assert named == [{}, {}, {b"toolref-key": b"key-b", b"x-api-key": b"sk-b"}]


class Recording(Inner):
    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return httpx.Response(200)


def over(link: object, inner: Recording) -> ChannelTransport:
    """A sender whose channel is `link` (a stand-in), `inner` its HTTP."""
    transport = ChannelTransport(
        inner, "http://127.0.0.1:9", None, connect_timeout=1, report=lambda line: None
    )
    transport._link = link  # type: ignore[assignment]
    transport.clock = lambda: 0.0
    return transport


class Busy:
    """A link with a turn in flight (what `ChannelTransport.busy` reads)."""

    closed = over = False
    streams = {1: None}

    async def close(self) -> None:
        raise AssertionError("a channel with a turn in flight was closed")


async def test_a_sender_never_closes_a_channel_with_a_turn_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(channels_module, "MAX_CHANNELS", 2)
    channels, inner = Channels(lambda line: None), Recording()
    made = []
    for n in range(3):
        url = f"http://b{n}:1/v1/messages"
        channels.told(request(url), told("/v1/channel"))
        made.append(await channels.sender(inner, request(url)))
        made[-1]._link = Busy()  # its turns go on
    assert made[2] is inner  # every channel busy: the new one's turns over HTTP
    assert len(channels.open) == 2


async def test_a_channel_closed_by_its_owner_sends_over_http_for_good() -> None:
    inner = Recording()
    transport = ChannelTransport(
        inner, "http://127.0.0.1:9", None, connect_timeout=1, report=lambda line: None
    )
    await transport.close_link()
    answer = await transport.handle_async_request(request("http://127.0.0.1:9/v1/messages"))
    assert answer.status_code == 200
    assert len(inner.sent) == 1  # never a connect: retired


async def test_a_turn_past_the_bound_is_answered_busy_and_the_sender_sends_it_over_http() -> None:
    socket, release = Socket(), asyncio.Event()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    task = await serving(socket, slow)
    sender = frames.Sender()
    for stream in range(frames.MAX_STREAMS + 1):
        socket.frame(sender.turn(stream, "/v1/messages", HEADERS, b"{}"))
    await settled(socket, 2)
    busy = [a for a in socket.answers() if a.stream == frames.MAX_STREAMS]
    status, pairs = busy[0].head()
    assert status == 503
    assert (frames.BUSY[0].lower(), frames.BUSY[1]) in [(k.lower(), v) for k, v in pairs]
    release.set()
    await settled(socket, 3 * frames.MAX_STREAMS + 2)
    socket.leave()
    await task

    class Link:  # a channel whose receiver is that busy
        closed, streams, used, opened, heard = False, dict[int, Any](), 0.0, 0.0, 0

        async def send(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(503, headers=[frames.BUSY], request=request)

    inner = Recording()
    transport = over(Link(), inner)
    answer = await transport.handle_async_request(request("http://127.0.0.1:9/v1/messages"))
    assert answer.status_code == 200
    assert len(inner.sent) == 1  # sent again over HTTP, where it was served


async def test_a_receiver_that_names_no_channel_any_more_is_sent_over_http() -> None:
    channels, inner = Channels(lambda line: None), Inner()
    chat = "http://b:1/v1/chat/completions"
    channels.told(request(chat), told("/v1/channel"))
    assert isinstance(await channels.sender(inner, request(chat)), ChannelTransport)
    channels.told(request(chat), told("/v1/channel", receiver=False))  # a problem: no word
    assert isinstance(await channels.sender(inner, request(chat)), ChannelTransport)
    channels.told(request(chat), told(None))  # an edit's answer, no channel named
    assert await channels.sender(inner, request(chat)) is inner
    await channels.aclose()


async def test_turns_past_the_bytes_a_channel_holds_are_answered_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each turn's frame is in memory whole while it is served: past `MAX_HELD_BYTES` of
    bodies at once, a turn is answered busy (the sender sends it over HTTP) and the app
    never sees it."""
    monkeypatch.setattr(frames, "MAX_HELD_BYTES", 1000)
    socket, release, seen = Socket(), asyncio.Event(), list[Scope]()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    task = await serving(socket, slow)
    sender = frames.Sender()
    socket.frame(sender.turn(0, "/v1/messages", HEADERS, b"x" * 600))
    socket.frame(sender.turn(1, "/v1/messages", HEADERS, b"y" * 600))
    await settled(socket, 2)
    [busy] = [a for a in socket.answers() if a.stream == 1 and a.kind == frames.HEAD]
    assert busy.head()[0] == 503
    assert len(seen) == 1
    release.set()
    await settled(socket, 5)
    socket.frame(sender.turn(2, "/v1/messages", HEADERS, b"z" * 600))  # room again
    await settled(socket, 8)
    socket.leave()
    await task
    assert len(seen) == 2


class Stuck(Socket):
    """A sender that reads no answer: every write waits on it for ever."""

    async def send(self, message: Message) -> None:
        if message["type"] == "websocket.send":
            await asyncio.Event().wait()
        await super().send(message)


async def test_a_sender_that_reads_no_answer_cannot_pile_turns_up() -> None:
    """Past `MAX_STREAMS` turns are answered busy, their bodies not held; a sender that
    reads none of those answers (each busy turn waits to write it) and sends more has the
    channel ended at twice the bound, every turn cancelled: no task or body piles up."""
    socket, started = Stuck(), list[Scope]()

    async def holding(scope: Scope, receive: Receive, send: Send) -> None:
        started.append(scope)
        await asyncio.Event().wait()

    task = await serving(socket, holding)
    sender = frames.Sender()
    for stream in range(10 * frames.MAX_STREAMS):
        socket.frame(sender.turn(stream, "/v1/messages", HEADERS, b"x" * 1000))
        await asyncio.sleep(0)  # each turn's task runs as far as it can
    await asyncio.wait_for(task, 10)  # it ended by itself, the sender still connected
    assert len(started) == frames.MAX_STREAMS
    assert socket.incoming.qsize() > 0  # frames past the end were never read
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert all(t.done() for t in left if "_served" in repr(t.get_coro()))


@pytest.mark.parametrize(
    ("meta", "why"),
    [
        (b'{"p":"/x","h":[' + b",".join([b'["a","b"]'] * 300) + b"]}", "over 256 headers"),
        (b'{"p":"/x","h":[["a","' + b"v" * (70 << 10) + b'"]]}', "meta is"),
        (b'{"p":' + b"[" * 30_000 + b"]" * 30_000 + b"}", "not a JSON object"),
    ],
)
def test_a_request_frame_past_the_receivers_bounds_does_not_read(meta: bytes, why: str) -> None:
    """Headers past `MAX_HEADERS`, meta past `MAX_META_BYTES` (its headers are rebuilt into
    every later turn's scope), and meta nested past the parser's depth: each a FrameError,
    which closes the channel (1002), never an exception escaping the receiver."""
    frame = varint(1) + varint(len(meta)) + meta + b"{}"
    with pytest.raises(frames.FrameError, match=why):
        frames.Receiver().turn(frame)


def test_an_answer_head_nested_past_the_parsers_depth_does_not_read() -> None:
    frame = varint(0) + bytes([frames.HEAD]) + b"[" * 100_000
    with pytest.raises(frames.FrameError):
        frames.answered(frame).head()


async def test_an_answer_head_with_no_headers_is_served_over_the_channel() -> None:
    """ASGI makes `headers` optional on `http.response.start`: such an answer is served as
    it is over HTTP, not broken off."""
    socket = Socket()

    async def bare(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 204})
        await send({"type": "http.response.body", "body": b""})

    task = await serving(socket, bare)
    socket.frame(frames.Sender().turn(0, "/v1/messages", HEADERS, b"{}"))
    await settled(socket, 2)
    socket.leave()
    await task
    head, end = socket.answers()
    assert head.head() == (204, [])
    assert end.kind == frames.END


async def test_a_request_past_the_frame_limit_and_a_closed_channel_go_over_http() -> None:
    """A body past `MAX_FRAME_BYTES` (a receiver's message limit would close the channel,
    and every turn on it) goes over HTTP; so does a turn whose channel closed before it
    was written (nothing was sent)."""

    class Closed:  # a channel that closed while the turn waited to be written
        closed, streams, used, opened, heard = False, dict[int, Any](), 0.0, 0.0, 0

        async def send(self, request: httpx.Request) -> httpx.Response:
            raise channel_link.Unsent("the channel closed")

    inner = Recording()
    transport = over(Closed(), inner)
    answer = await transport.handle_async_request(request("http://127.0.0.1:9/v1/messages"))
    assert answer.status_code == 200
    large = httpx.Request(
        "POST", "http://127.0.0.1:9/v1/messages", content=b"x" * (frames.MAX_FRAME_BYTES + 1)
    )
    assert (await transport.handle_async_request(large)).status_code == 200
    assert len(inner.sent) == 2


class Unread(Socket):
    """A sender that reads nothing: its window full, every write waits on it for ever, the
    close included (uvicorn's `send` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.tried: list[Message] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "websocket.accept":
            await super().send(message)
            return
        self.tried.append(message)
        await asyncio.Event().wait()


async def test_a_channel_closed_to_a_sender_that_reads_nothing_is_let_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frame that does not read closes the channel (1002); to a sender that reads nothing
    that close is given up on after `CLOSE_TIMEOUT`, as the bridge's is, and the channel's
    task ends (it waited for ever, holding whatever its server holds for it)."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    socket = Unread()
    task = await serving(socket, answering([]))
    socket.frame(b"\xff")  # no frame: the channel is closed
    await asyncio.wait_for(task, 10)
    assert socket.tried == [{"type": "websocket.close", "code": 1002, "reason": ""}]


async def test_a_channel_closed_behind_a_write_that_never_ends_is_let_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The close waits for the socket's one writer: behind a turn's answer its sender never
    reads, that wait is bounded by `CLOSE_TIMEOUT` too, and the channel ends with no close
    sent (the socket is busy; its server drops it as the channel's task returns), its turn
    cancelled."""
    from toolref.websocket import driver

    monkeypatch.setattr(driver, "CLOSE_TIMEOUT", 0.2)
    socket, seen = Unread(), list[Scope]()
    task = await serving(socket, answering(seen))
    sender = frames.Sender()
    socket.frame(sender.turn(3, "/v1/messages", HEADERS, b"{}"))
    for _ in range(200):  # its answer's head is being written, for ever
        if socket.tried:
            break
        await asyncio.sleep(0.005)
    socket.frame(sender.turn(3, "/v1/messages", HEADERS, b"{}"))  # reused: closes
    await asyncio.wait_for(task, 10)
    assert len(seen) == 1
    assert [m["type"] for m in socket.tried] == ["websocket.send"]  # the close never got in
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert all(t.done() for t in left if "_served" in repr(t.get_coro()))


async def test_the_relay_counts_a_channel_turn_as_its_frame_and_a_busy_one_twice() -> None:
    """The relay's `Meter` counts what went on the wire: a turn the channel carried, its
    frame (no HTTP head); one the channel answered busy and HTTP then carried, that frame
    and the HTTP request. Before, both counted the HTTP request alone."""
    from toolref_relay.calls import Meter, wire_size

    class Link:  # a channel carrying each turn as a frame of 40 bytes, or busy
        closed, streams, used, busy = False, dict[int, Any](), 0.0, False
        opened, heard = 0.0, 0

        async def send(self, request: httpx.Request) -> httpx.Response:
            status, headers = (503, [frames.BUSY]) if self.busy else (200, [])
            extensions = {channel_link.CARRIED: True, channel_link.FRAMED: 40}
            return httpx.Response(status, headers=headers, request=request, extensions=extensions)

    link, inner = Link(), Recording()
    meter = Meter(over(link, inner))
    turn = request("http://127.0.0.1:9/v1/messages")
    assert (await meter.handle_async_request(turn)).status_code == 200
    assert meter.sent == 40
    assert inner.sent == []
    link.busy, meter.sent = True, 0
    assert (await meter.handle_async_request(turn)).status_code == 200
    assert inner.sent == [turn]  # over HTTP after the busy answer
    assert meter.sent == 40 + wire_size(turn)


@pytest.mark.parametrize(
    ("target", "headers", "said"),
    [
        ("/v1/messages", [("x-api-key", "k\r\nx-injected: 1")], "x-api-key's value"),
        ("/v1/messages", [("x-trace", "a\nb")], "x-trace's value"),
        ("/v1/messages", [("x-trace", "\x00")], "x-trace's value"),
        ("/v1/messages", [("x-trace", "caf\u00e9 \u2603")], "x-trace's value"),
        ("/v1/messages", [("x-trace", " padded ")], "x-trace's value"),
        ("/v1/messages", [("bad name", "v")], "'bad name' is not a token"),
        ("/v1/messages", [("", "v")], "'' is not a token"),
        ("/v1/mess ages", [], "target"),
        ("/v1/\u2603", [], "target"),
    ],
)
async def test_a_turn_no_http_request_could_carry_is_refused_400_before_the_app(
    target: str, headers: list[tuple[str, str]], said: str
) -> None:
    """A frame's head is JSON, which can say what no HTTP/1.1 head can (a line break in a
    value, a character past latin-1): served, it failed where it was written upstream, and
    the gateway answered 502 upstream-unreachable with Retry-After, blaming the upstream for
    a turn that can never succeed. Refused 400 now, as an HTTP server refuses such a head,
    before the app sees it (nothing applied, nothing kept)."""
    socket, seen = Socket(), list[Scope]()
    task = await serving(socket, answering(seen))
    socket.frame(frames.Sender().turn(0, target, [*HEADERS, *headers], b"{}"))
    await settled(socket, 3)
    socket.leave()
    await task
    assert seen == []
    head, piece, end = socket.answers()
    assert head.head()[0] == 400
    assert end.kind == frames.END
    problem = json.loads(piece.data)
    assert problem["type"].endswith("malformed-request")
    assert said in problem["detail"]
    assert "visible latin-1" in problem["detail"]
    for _, value in headers:  # a value may be a credential: never repeated
        assert len(value) < 3 or value.strip() not in problem["detail"]


def test_what_http_carries_is_sendable() -> None:
    """What h11 reads and writes passes: DEL and other controls but NUL and line breaks in a
    value (h11's pattern is of bytes), latin-1, inner spaces and tabs, an empty value."""
    pairs = [("x-a", "a b\tc"), ("x-e", ""), ("x-d", "a\x7fb\x01"), ("x-l", "caf\u00e9\xa0")]
    ok = frames.Turn(0, "/llm/a/v1/messages?x=%20&y=caf\u00e9", pairs, b"")
    assert frames.unsendable(ok) is None
    assert frames.unsendable(frames.Turn(0, "/", list(HEADERS), b"")) is None
