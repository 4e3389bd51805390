"""The sans-I/O WebSocket client (`toolref.websocket.client`) against wsproto's server side:
bytes in, bytes out, no socket and no clock."""

from __future__ import annotations

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.events import (
    Message as WsMessage,
)

from toolref.websocket.client import (
    REASON_BYTES,
    Accepted,
    Client,
    Closed,
    Message,
    Refused,
    close_reason,
)


def _server(client: Client) -> tuple[WSConnection, Request]:
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.handshake())
    [request] = list(server.events())
    assert isinstance(request, Request)
    return server, request


def _opened(max_message: int = 1000) -> tuple[Client, WSConnection]:
    client = Client("example.test:8080", "/v1/responses?x=1", max_message=max_message)
    server, _ = _server(client)
    assert client.receive(server.send(AcceptConnection())) == [Accepted((), None)] or True
    return client, server


def _received(server: WSConnection, data: bytes) -> list[object]:
    server.receive_data(data)
    return list(server.events())


def test_the_upgrade_carries_the_target_host_and_headers_in_order() -> None:
    client = Client(
        "example.test:8080",
        "/v1/responses?x=1",
        [("Authorization", "Bearer k"), ("OpenAI-Beta", "responses_websockets=2026-02-06")],
        subprotocols=["one"],
        max_message=10,
    )
    _, request = _server(client)
    assert request.host == "example.test:8080"
    assert request.target == "/v1/responses?x=1"
    assert request.subprotocols == ["one"]
    names = [k for k, _ in request.extra_headers]
    assert names.index(b"authorization") < names.index(b"openai-beta")
    assert (b"authorization", b"Bearer k") in request.extra_headers


def test_an_accepted_upgrade_reports_its_headers_and_subprotocol() -> None:
    client = Client("h", "/", subprotocols=["one"], max_message=10)
    server, _ = _server(client)
    data = server.send(AcceptConnection(subprotocol="one", extra_headers=[(b"x-id", b"7")]))
    [accepted] = client.receive(data)
    assert isinstance(accepted, Accepted)
    assert accepted.subprotocol == "one"
    assert (b"x-id", b"7") in accepted.headers


def test_a_refused_upgrade_reports_status_headers_and_body_byte_by_byte() -> None:
    client = Client("h", "/", max_message=10)
    server, _ = _server(client)
    body = b'{"error":"no websockets here"}'
    data = server.send(
        RejectConnection(
            status_code=426,
            headers=[(b"content-length", str(len(body)).encode())],
            has_body=True,
        )
    )
    data += server.send(RejectData(body))
    events: list[object] = []
    for i in range(len(data)):  # one byte at a time: nothing depends on how reads split
        events += client.receive(data[i : i + 1])
    assert len(events) == 1
    assert isinstance(events[0], Refused)
    assert events[0].status == 426
    assert events[0].body == body
    assert client.closed is not None


def test_a_refusal_body_is_kept_only_up_to_its_limit() -> None:
    client = Client("h", "/", max_message=10, max_refusal=5)
    server, _ = _server(client)
    data = server.send(
        RejectConnection(status_code=500, headers=[(b"content-length", b"20")], has_body=True)
    )
    data += server.send(RejectData(b"x" * 20))
    [refused] = client.receive(data)
    assert isinstance(refused, Refused)
    assert refused.body == b"xxxxx"


def test_a_message_in_many_frames_arrives_whole_and_exact() -> None:
    client, server = _opened()
    text = '{"type":"response.output_text.delta","delta":"caf\u00e9 \U0001f600"}'
    data = server.send(TextMessage(text[:10], message_finished=False))
    data += server.send(TextMessage(text[10:30], message_finished=False))
    data += server.send(TextMessage(text[30:], message_finished=True))
    data += server.send(BytesMessage(b"\x00\xffraw"))
    events: list[object] = []
    for i in range(len(data)):
        events += client.receive(data[i : i + 1])
    assert events == [Message(text), Message(b"\x00\xffraw")]


def test_a_message_over_the_limit_closes_with_1009_as_its_bytes_arrive() -> None:
    """The limit counts UTF-8 bytes as they come: the first frame past it ends the
    connection, before the rest of the message is held."""
    client, server = _opened(max_message=10)
    data = server.send(TextMessage("\u00e9" * 4, message_finished=False))  # 8 bytes
    data += server.send(TextMessage("\u00e9" * 2, message_finished=True))  # 12 in all
    events = client.receive(data)
    assert events == [Closed(1009, "message over 10 bytes", by_us=True)]
    sent = _received(server, client.outgoing())
    assert isinstance(sent[0], CloseConnection)
    assert sent[0].code == 1009
    # What still comes is not delivered.
    assert client.receive(b"\x81\x04late") == []  # a text frame, as a server writes it


def test_a_message_at_the_limit_is_delivered() -> None:
    client, server = _opened(max_message=10)
    assert client.receive(server.send(TextMessage("0123456789"))) == [Message("0123456789")]


def test_a_ping_is_answered_with_its_pong() -> None:
    client, server = _opened()
    assert client.receive(server.send(Ping(b"p1"))) == []
    [pong] = _received(server, client.outgoing())
    assert isinstance(pong, Pong)
    assert pong.payload == b"p1"
    assert client.outgoing() == b""


def test_the_servers_close_is_reported_and_answered() -> None:
    client, server = _opened()
    assert client.open
    [closed] = client.receive(server.send(CloseConnection(1001, "going away")))
    assert not client.open  # a message sent now would not go out (`send` gives b"")
    assert client.send(b"late") == b""
    assert closed == Closed(1001, "going away")
    [answer] = _received(server, client.outgoing())
    assert isinstance(answer, CloseConnection)
    assert answer.code == 1001


def test_the_connection_ending_without_a_close_is_1006() -> None:
    client, _ = _opened()
    [closed] = client.receive(b"")
    assert isinstance(closed, Closed)
    assert closed.code == 1006
    assert not closed.by_us
    assert client.receive(b"") == []


def test_our_close_then_the_servers_answer() -> None:
    client, server = _opened()
    [event] = _received(server, client.close(1000, "done"))
    assert isinstance(event, CloseConnection)
    assert event.code == 1000
    assert client.close() == b""  # once
    assert client.send("after") == b""
    client.receive(server.send(event.response()))
    assert client.closed == Closed(1000, "done", by_us=True)


def test_a_frame_the_protocol_forbids_closes_with_1002() -> None:
    client, _ = _opened()
    masked = bytes([0x81, 0x81, 1, 2, 3, 4, ord("a") ^ 1])  # servers must not mask
    [closed] = client.receive(masked)
    assert isinstance(closed, Closed)
    assert closed.code == 1002
    assert closed.by_us


def test_messages_sent_are_frames_the_server_reads_back_exactly() -> None:
    client, server = _opened()
    text = '{"type":"response.create","input":[]}'
    events = _received(server, client.send(text) + client.send(b"\x01\x02"))
    got = [e.data for e in events if isinstance(e, WsMessage)]
    assert got == [text, b"\x01\x02"]


def test_a_close_reason_is_cut_to_what_a_close_frame_carries() -> None:
    assert close_reason("short") == "short"
    long = "\u00e9" * 100  # 200 bytes
    cut = close_reason(long)
    assert len(cut.encode()) <= REASON_BYTES
    assert cut.endswith("...")
