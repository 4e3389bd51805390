"""The provider's own input token counts, read from an answer as it passes, for each API's
answers and streams; bounded (what passes the limit is not read)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolref_server.context.provider_usage import Usage, UsageReader


def events(*values: object, sep: bytes = b"\n\n") -> bytes:
    return b"".join(b"data: " + json.dumps(v).encode() + sep for v in values)


ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "cache_read_input_tokens": 900,
    "cache_creation_input_tokens": 80,
}
CASES = [
    pytest.param(
        "application/json",
        json.dumps({"type": "message", "usage": ANTHROPIC_USAGE}).encode(),
        Usage(992, 900, 80),
        id="anthropic-json",
    ),
    pytest.param(
        "text/event-stream",
        b"event: message_start\n"
        + events({"type": "message_start", "message": {"usage": ANTHROPIC_USAGE}})
        + b"event: message_delta\n"
        + events({"type": "message_delta", "usage": {"output_tokens": 30}}),
        Usage(992, 900, 80),
        id="anthropic-stream",
    ),
    pytest.param(
        "application/json; charset=utf-8",
        json.dumps(
            {
                "choices": [],
                "usage": {"prompt_tokens": 500, "prompt_tokens_details": {"cached_tokens": 384}},
            }
        ).encode(),
        Usage(500, 384),
        id="chat-json",
    ),
    pytest.param(
        "text/event-stream",
        events(
            {"choices": [{"delta": {"content": "hi"}}]},
            {"choices": [], "usage": {"prompt_tokens": 77}},
        )
        + b"data: [DONE]\n\n",
        Usage(77),
        id="chat-stream",
    ),
    pytest.param(
        "text/event-stream",
        events(
            {"type": "response.created", "response": {"usage": None}},
            {
                "type": "response.completed",
                "response": {
                    "usage": {"input_tokens": 4000, "input_tokens_details": {"cached_tokens": 3500}}
                },
            },
            sep=b"\r\n\r\n",
        ),
        Usage(4000, 3500),
        id="responses-stream",
    ),
    pytest.param(
        "text/event-stream",
        events(
            {
                "candidates": [],
                "usageMetadata": {"promptTokenCount": 321, "cachedContentTokenCount": 300},
            }
        ),
        Usage(321, 300),
        id="gemini-stream",
    ),
    pytest.param("application/json", b'{"choices": []}', None, id="none"),
    pytest.param("application/json", b"not json", None, id="not-json"),
]


@pytest.mark.parametrize(("kind", "answer", "found"), CASES)
@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_each_api_s_count_is_read_whatever_the_pieces(
    kind: str, answer: bytes, found: Usage | None, piece: int
) -> None:
    reader = UsageReader(kind)
    for at in range(0, len(answer), piece):
        reader.feed(answer[at : at + piece])
    assert reader.usage == found


def test_what_passes_the_limit_is_not_read() -> None:
    big = json.dumps({"usage": {"prompt_tokens": 50}, "pad": "x" * 200}).encode()
    reader = UsageReader("application/json", limit=100)
    reader.feed(big)
    assert reader.usage is None
    stream = UsageReader("text/event-stream", limit=100)
    stream.feed(b"data: " + big + b"\n\n")  # one line over the limit: skipped
    stream.feed(events({"usage": {"prompt_tokens": 9}}))
    assert stream.usage == Usage(9)
    pieces = UsageReader("text/event-stream", limit=100)
    for at in range(0, len(big), 30):  # over the limit before its line ends: skipped too
        pieces.feed((b"data: " + big)[at : at + 30])
    pieces.feed(b"\n\n" + events({"usage": {"prompt_tokens": 9}}))
    assert pieces.usage == Usage(9)


def test_a_compressed_answer_is_not_read_and_a_last_line_without_its_end_is() -> None:
    body = json.dumps({"usage": {"prompt_tokens": 5}}).encode()
    compressed = UsageReader("application/json", encoded=True)
    compressed.feed(body)
    assert compressed.usage is None
    stream = UsageReader("text/event-stream")
    stream.feed(b"data: " + body)  # the stream ended with no line end
    assert stream.usage == Usage(5)


class _Counted(bytearray):
    """A reader's buffer that counts the bytes its searches for a line end go over."""

    scanned = 0

    def find(self, sub: object, start: int = 0, *rest: int) -> int:  # type: ignore[override]
        self.scanned += len(self) - start
        return super().find(sub, start, *rest)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1 << 20, 1000], ids=["within", "past-the-limit"])
def test_a_long_line_in_tiny_pieces_is_searched_once(limit: int) -> None:
    """Each byte of a stream is searched for a line end once, however small its pieces
    (every piece searched the whole line held so far: quadratic, up to the 1 MiB limit)."""
    line = b"data: " + json.dumps({"usage": {"prompt_tokens": 7}, "pad": "x" * 20_000}).encode()
    stream = line + b"\n\n" + events({"usage": {"prompt_tokens": 3}})
    reader = UsageReader("text/event-stream", limit=limit)
    held = reader._held = _Counted()
    for at in range(len(stream)):
        reader.feed(stream[at : at + 1])
    assert reader.usage == (Usage(7) if limit > len(line) else Usage(3))
    assert held.scanned <= 2 * len(stream)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                b"data: " + json.dumps({"usage": {"prompt_tokens": 5}}).encode(),
                b"data: " + json.dumps({"usage": {"input_tokens": 8}, "p": "y" * 60}).encode(),
                b"event: x",
                b"",
                b"data: " + b"z" * 90,
            ]
        ),
        max_size=12,
    ),
    st.lists(st.integers(1, 40), min_size=1, max_size=30),
    st.sampled_from([b"\n", b"\r\n"]),
)
def test_a_stream_in_any_pieces_reads_as_it_does_whole(
    lines: list[bytes], sizes: list[int], end: bytes
) -> None:
    stream = b"".join(line + end for line in lines)
    whole = UsageReader("text/event-stream", limit=80)
    whole.feed(stream)
    pieces = UsageReader("text/event-stream", limit=80)
    at = 0
    for size in sizes * (len(stream) // sum(sizes) + 1):
        pieces.feed(stream[at : at + size])
        at += size
    assert pieces.usage == whole.usage
