"""Bases named by stream on a channel (`toolref.websocket.bases`, issue 39): an edit's
16-byte base id travels as one byte, how many streams back the turn that made it went, and
the receiver writes the id back, so the app reads the sender's edit byte for byte; a base
the receiver forgot is answered busy (the sender goes over HTTP), never read as another;
only edits, only recipes an answer head named with status 200, only where both sides said
so on the upgrade, each side's memory bounded."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.test_channel_sides import HEADERS, UPGRADE, Socket, refuse, settled
from toolref.asgi.scope import Message, Receive, Scope, Send
from toolref.edits import compact, wire
from toolref.edits.edit import Inline, Keep, Op
from toolref.edits.recipe import recipe_ref_of
from toolref.receiving.channel_server import serve_channel
from toolref.websocket import bases
from toolref.websocket import channel as frames
from toolref.websocket.bases import KEPT, MOST, ReceiverBases, SenderBases
from toolref.wire.errors import MalformedBodyError
from toolref.wire.headers import HISTORY_HEADER

TARGET = "/v1/messages"


def ref(n: int) -> str:
    return recipe_ref_of(n.to_bytes(16, "big"))


def edit(base: str, tail: bytes = b"x" * 40) -> bytes:
    ops: list[Op] = [Inline(b""), Keep(0, 3), Inline(tail)]
    return wire.encode_isolated(base, ops, version=8)


def made(n: int, status: int = 200) -> tuple[int, list[tuple[str, str]]]:
    return status, [("content-type", "text/event-stream"), (HISTORY_HEADER, ref(n))]


def test_the_compact_header_names_its_base_by_stream_and_by_id_again() -> None:
    body = edit(ref(7))
    base = compact.base_of(body)
    assert base == (7).to_bytes(16, "big")
    short = compact.by_stream(body, 3)
    assert len(short) == len(body) - 15
    assert compact.base_of(short) is None
    back, at = compact.named_back(short) or (0, 0)
    assert back == 3
    assert compact.with_base(short, base, at) == body
    assert compact.named_back(body) is None
    with pytest.raises(MalformedBodyError, match="named by a channel's stream"):
        wire.read(short, 1 << 20)  # anywhere but a channel's receiver


def test_a_turn_names_the_base_its_turn_before_made_and_reads_back_exactly() -> None:
    sender = frames.Sender(SenderBases())
    receiver = frames.Receiver(ReceiverBases())
    first = receiver.turn(sender.turn(0, TARGET, HEADERS, edit(ref(1))))
    assert isinstance(first, frames.Turn)
    assert first.body == edit(ref(1))  # no stream made it: by its id
    receiver.made(0, *made(5))
    sender.made(0, *made(5))
    body = edit(ref(5))
    frame = sender.turn(1, TARGET, HEADERS, body)
    assert len(frame) <= len(body) + 3 - 15  # the stream, an empty meta; one byte for 16
    second = receiver.turn(frame)
    assert isinstance(second, frames.Turn)
    assert second.body == body
    assert not second.unheld


def test_what_is_never_named_by_stream() -> None:
    sender, receiver = SenderBases(), ReceiverBases()
    for side in (sender, receiver):
        side.made(0, *made(1))
        side.made(1, *made(2, status=409))  # refused: made nothing
        side.made(2, 200, [("content-type", "application/json")])  # no recipe named
    body = edit(ref(1))
    assert sender.written(3, HEADERS, body) != body
    plain = [("content-type", "application/json")]
    assert sender.written(3, plain, body) == body  # not an edit
    assert sender.written(3, HEADERS, edit(ref(2))) == edit(ref(2))  # not made: a 409
    assert sender.written(MOST, HEADERS, body) == body  # too far back
    assert sender.written(0, HEADERS, body) == body  # not before this turn
    assert receiver.read(3, plain, compact.by_stream(body, 3)) == compact.by_stream(body, 3)


def test_a_base_the_receiver_forgot_is_never_read_as_another() -> None:
    sender = frames.Sender(SenderBases())
    receiver = frames.Receiver(ReceiverBases())
    sender.made(0, *made(1))  # the receiver never sent it (another channel's, a bug)
    turn = receiver.turn(sender.turn(1, TARGET, HEADERS, edit(ref(1))))
    assert isinstance(turn, frames.Turn)
    assert turn.unheld
    assert turn.body == b""


def test_each_side_remembers_a_bounded_number_of_heads() -> None:
    sender, receiver = SenderBases(), ReceiverBases()
    for stream in range(KEPT + 50):
        sender.made(stream, *made(stream + 1))
        receiver.made(stream, *made(stream + 1))
    last = KEPT + 49
    assert receiver.read(last + 1, HEADERS, compact.by_stream(edit(ref(1)), last + 1)) is None
    kept = compact.by_stream(edit(ref(last + 1)), 1)
    assert receiver.read(last + 1, HEADERS, kept) == edit(ref(last + 1))
    assert sender.written(last + 1, HEADERS, edit(ref(1))) == edit(ref(1))
    assert len(sender._streams) == KEPT
    assert len(receiver._made) == KEPT


def test_the_upgrade_asks_and_the_receiver_grants() -> None:
    assert bases.granted("1")
    assert not bases.granted(None)
    assert not bases.granted("2")
    assert bases.kept([(b"Toolref-Channel-Bases", b"1")])
    assert not bases.kept([(b"toolref-channel-window", b"65536")])


async def test_a_receiver_serves_a_turn_named_by_stream_and_refuses_one_it_forgot() -> None:
    """Through `serve_channel`: the app reads the edit with its base's id; a turn naming
    a stream whose head named no recipe is answered busy (503, `Toolref-Channel: busy`),
    the app never seeing it."""
    socket, bodies = Socket(), list[bytes]()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message: Message = await receive()
        bodies.append(message["body"])
        headers = [(HISTORY_HEADER.lower().encode(), ref(len(bodies)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})

    scope = {**UPGRADE, "headers": [*UPGRADE["headers"], (bases.HEADER.encode(), b"1")]}
    task = asyncio.create_task(
        serve_channel(scope, socket.receive, socket.send, app, refuse=refuse)
    )
    await asyncio.sleep(0)
    assert socket.sent[0]["headers"] == [(bases.HEADER.encode(), b"1")]  # granted
    sender = frames.Sender(SenderBases())
    socket.frame(sender.turn(0, TARGET, HEADERS, edit(ref(9))))
    await settled(socket, 3)
    sender.made(0, *socket.answers()[0].head())  # stream 0 made ref(1)
    named = edit(ref(1))
    frame = sender.turn(1, TARGET, HEADERS, named)
    assert len(frame) < len(named)
    socket.frame(frame)
    await settled(socket, 6)
    assert bodies == [edit(ref(9)), named]
    socket.frame(frames.Sender().turn(5, TARGET, HEADERS, compact.by_stream(named, 1)))
    await settled(socket, 9)
    socket.leave()
    await task
    assert bodies == [edit(ref(9)), named]  # stream 4 made nothing: the app never saw it
    status, pairs = next(a for a in socket.answers() if a.stream == 5).head()
    assert status == 503
    assert (frames.BUSY[0].lower(), frames.BUSY[1]) in pairs
