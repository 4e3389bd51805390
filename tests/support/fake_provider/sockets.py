"""The fake provider's Responses WebSocket mode (`GET /v1/responses` upgraded), as OpenAI's
works: each text message is a `response.create` event (the Responses request's fields,
`input` the new items only); `previous_response_id` continues a response this socket
answered (its input and output, kept per socket, as OpenAI keeps them for the socket's
life), `generate: false` only prepares one (a prewarm: `response.created`, then
`response.completed` with no output). The answer is the same `response.*` events as over
server-sent events, one JSON text message each. Every message that came is kept byte for
byte (`Recorded`, method `WS`, its `wire` the message's UTF-8), and so is every message sent
back, per socket (`SocketLog`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.fake_provider.reading import Recorded, tool_results
from tests.support.fake_provider.wire import Reply, responses_events, responses_item

if TYPE_CHECKING:
    from tests.support.fake_provider.app import FakeProvider


@dataclass
class SocketLog:
    """One socket: its upgrade's headers, the messages that came and went (as sent), and
    how it ended (`closed`: the client's close code; None while open)."""

    headers: list[tuple[str, str]]
    received: list[bytes] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    closed: int | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


def _error(code: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "status": 400,
        "error": {"type": "invalid_request_error", "code": code, "message": message},
    }


class ResponsesSocket:
    """One accepted socket of the fake (see the module docstring)."""

    _ids = itertools.count()

    def __init__(self, fake: FakeProvider, websocket: WebSocket) -> None:
        self.fake = fake
        self.websocket = websocket
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in websocket.headers.raw]
        self.log = SocketLog(headers)
        self.items: dict[str, list[dict[str, Any]]] = {}  # response id -> its conversation

    async def serve(self) -> None:
        await self.websocket.accept()
        self.fake.sockets.append(self.log)
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.log.closed = int(message.get("code", 1000))
                    return
                text = message.get("text")
                data = text.encode() if text is not None else message.get("bytes") or b""
                self.log.received.append(data)
                await self._answer(data)
        except WebSocketDisconnect as exc:
            self.log.closed = exc.code
        finally:
            self.log.ended.set()

    async def _answer(self, data: bytes) -> None:
        record = Recorded(
            index=self.fake.next_index(),
            method="WS",
            path=self.websocket.url.path,
            query=self.websocket.url.query,
            headers=self.log.headers,
            wire=data,
            body=data,
            api="responses",
            stream=True,
        )
        self.fake.keep(record)
        try:
            event = json.loads(data)
        except ValueError as exc:
            record.answer = f"error: not JSON ({exc})"
            await self._send(_error("invalid_json", record.answer))
            return
        if not isinstance(event, dict) or event.get("type") != "response.create":
            record.answer = "error: not a response.create event"
            await self._send(_error("unknown_event", record.answer))
            return
        previous = event.get("previous_response_id")
        earlier: list[dict[str, Any]] = []
        if previous is not None:
            if previous not in self.items:
                record.answer = "error: previous_response_not_found"
                await self._send(_error("previous_response_not_found", f"no {previous}"))
                return
            earlier = self.items[previous]
        new = event.get("input") or []
        items = earlier + (new if isinstance(new, list) else [{"role": "user", "content": new}])
        body = {k: v for k, v in event.items() if k not in ("type", "previous_response_id")}
        body["input"] = items
        record.results = len(tool_results("responses", body))
        rid = f"resp_ws_{next(self._ids):04d}"
        model, tokens = str(body.get("model", "fake")), max(1, len(data) // 4)
        if event.get("generate") is False:
            record.answer = "prewarm"
            self.items[rid] = items
            await self._stream(_prewarm(rid, model))
            return
        reply = self.fake.models["responses"]("responses", body)
        record.answer = reply.answer
        self.items[rid] = [*items, responses_item(reply)]
        await self._stream(_renamed(responses_events(reply, model, tokens), rid))

    async def _stream(self, events: list[dict[str, Any]]) -> None:
        for n, event in enumerate(events):
            if n and self.fake.delay:
                await asyncio.sleep(self.fake.delay)
            await self._send(event)

    async def _send(self, event: dict[str, Any]) -> None:
        text = json.dumps(event)
        self.log.sent.append(text.encode())
        await self.websocket.send_text(text)


def _renamed(events: list[dict[str, Any]], rid: str) -> list[dict[str, Any]]:
    """The events with this socket's response id (ids from the step number repeat)."""
    for event in events:
        if isinstance(event.get("response"), dict):
            event["response"] = {**event["response"], "id": rid}
    return events


def _prewarm(rid: str, model: str) -> list[dict[str, Any]]:
    reply = Reply(text="", index=0)
    created, *_, completed = responses_events(reply, model, 1)
    done = {**completed["response"], "output": [], "usage": {**completed["response"]["usage"]}}
    return _renamed(
        [
            {**created, "sequence_number": 0},
            {"type": "response.completed", "response": done, "sequence_number": 1},
        ],
        rid,
    )


def route(fake: FakeProvider) -> Callable[[WebSocket], Any]:
    async def endpoint(websocket: WebSocket) -> None:
        await ResponsesSocket(fake, websocket).serve()

    return endpoint
