"""A fake upstream LLM for the gateway-speed bench: asyncio streams, no framework, so that it
costs a small fraction of what the systems in front of it cost (the bench measures it alone).

Every POST gets a fixed short answer in the shape of its API, read from the path: Anthropic
Messages (`.../messages`) or OpenAI Chat Completions (anything else); server-sent events
when the body asks `"stream": true`, one JSON document otherwise. A bench may script the
next streamed answer: `POST /__next-answer` with `{"format": ..., "message": {...}}` (the
assistant message the conversation's next turn writes back, `loadtests.scripted`) makes
the next streamed answer that message. Bodies are read by
`Content-Length` or chunked and never parsed; connections are kept alive.

    python -m loadtests.fast_upstream --port 8790
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Final

from loadtests import scripted

_STREAM: Final = re.compile(rb'"stream"\s*:\s*true')
_TEXT: Final = "Scripted answer: the change is done and the tests pass."


def _sse(events: list[tuple[str | None, dict[str, object]]]) -> bytes:
    out = []
    for name, data in events:
        out.append((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n")
    return "".join(out).encode()


_MESSAGE: Final = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "bench-1",
    "content": [{"type": "text", "text": _TEXT}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 14},
}
_CHAT: Final = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "bench-1",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": _TEXT},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 14, "total_tokens": 26},
}
_MESSAGE_EVENTS: Final = _sse(
    [
        ("message_start", {"type": "message_start", "message": {**_MESSAGE, "content": []}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": _TEXT},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        ("message_stop", {"type": "message_stop"}),
    ]
)
_CHAT_EVENTS: Final = (
    _sse(
        [
            (None, {**_CHAT, "object": "chat.completion.chunk", "choices": [choice]})
            for choice in (
                {"index": 0, "delta": {"role": "assistant", "content": _TEXT}},
                {"index": 0, "delta": {}, "finish_reason": "stop"},
            )
        ]
    )
    + b"data: [DONE]\n\n"
)


_SCRIPTED: list[bytes] = []  # the next streamed answers, when a bench scripts them
_NO_CONTENT: Final = b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"


def _answer(body: bytes, media: str) -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {media}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


# the fixed streamed answers' events, by whether the API is Anthropic's (the chat backend's
# too, `loadtests.chat_backend`, so that both paths of the edits bench answer alike)
EVENTS: Final = {True: _MESSAGE_EVENTS, False: _CHAT_EVENTS}
ANSWERS: Final = {
    (True, False): _answer(json.dumps(_MESSAGE).encode(), "application/json"),
    (True, True): _answer(_MESSAGE_EVENTS, "text/event-stream"),
    (False, False): _answer(json.dumps(_CHAT).encode(), "application/json"),
    (False, True): _answer(_CHAT_EVENTS, "text/event-stream"),
}
_NOT_FOUND: Final = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


async def _body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lowered = head.lower()
    found = re.search(rb"\r\ncontent-length:\s*(\d+)", lowered)
    if found:
        return await reader.readexactly(int(found.group(1)))
    if b"\r\ntransfer-encoding: chunked" not in lowered:
        return b""
    pieces: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(pieces)
        pieces.append((await reader.readexactly(size + 2))[:-2])


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            body = await _body(reader, head)
            method, path = head.split(b" ", 2)[:2]
            path = path.split(b"?", 1)[0]
            stream = _STREAM.search(body) is not None
            if method != b"POST":
                writer.write(_NOT_FOUND)
            elif path == b"/__next-answer":
                script = json.loads(body)
                events = scripted.stream(script["format"], script["message"])
                _SCRIPTED.append(_answer(events, "text/event-stream"))
                writer.write(_NO_CONTENT)
            elif stream and _SCRIPTED:
                writer.write(_SCRIPTED.pop(0))
            else:
                anthropic = path.endswith(b"/messages")
                writer.write(ANSWERS[anthropic, stream])
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 20, backlog=512)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
