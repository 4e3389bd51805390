"""`toolref.edits.answer`: the bytes a streamed answer makes (the next edit's dictionary),
the same however the stream is cut into pieces, and none unless it ended whole; version-3
edits carry the model's segments against them and read back exactly (issue 39)."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import js_answer_vectors
from tests.support.fake_provider import wire as provider
from toolref.edits import isolated, wire
from toolref.edits.answer import MAX_ANSWER, MAX_STREAM, AnswerTap, answer_id, tap_for
from toolref.edits.edit import Inline, Keep, Op
from toolref.edits.request import cut
from toolref.wire.errors import DictionaryMismatchError, MalformedBodyError

CALL = provider.Reply(call=provider.Call("bash", {"command": "ls -la src/ && pytest -q"}), index=1)
TEXT = provider.Reply(text="The tests pass: 42 passed in 3.1s. Next I will tidy the module.")
EVENT_STREAM = [("content-type", "text/event-stream; charset=utf-8")]


def stream(api: provider.Api, reply: provider.Reply) -> bytes:
    return b"".join(provider.frames(api, reply, "m", 10, usage=True))


def tapped(path: str, data: bytes, pieces: list[int]) -> bytes | None:
    tap = tap_for(path, 200, EVENT_STREAM)
    assert tap is not None
    at = 0
    for size in [*pieces, len(data)]:
        tap.feed(data[at : at + size])
        at += size
    return tap.answer


@given(st.lists(st.integers(min_value=1, max_value=97), max_size=40))
def test_any_cut_of_the_stream_makes_the_same_answer(pieces: list[int]) -> None:
    cases: list[tuple[str, provider.Api, provider.Reply]] = [
        ("/v1/messages", "messages", CALL),
        ("/v1/messages", "messages", TEXT),
        ("/v1/chat/completions", "chat", CALL),
        ("/v1/chat/completions", "chat", TEXT),
    ]
    for path, api, reply in cases:
        data = stream(api, reply)
        assert tapped(path, data, pieces) == tapped(path, data, [len(data)])
        assert tapped(path, data.replace(b"\n", b"\r\n"), pieces) == tapped(path, data, [])


def test_the_answer_holds_what_the_agent_writes_back() -> None:
    answer = tapped("/v1/messages", stream("messages", CALL), [])
    assert answer is not None
    block = json.dumps(provider.anthropic_message(CALL, "m", 1)["content"], separators=(",", ":"))
    assert block.encode() in answer  # the content as an agent writes it back, compact
    chat = tapped("/v1/chat/completions", stream("chat", CALL), [])
    assert chat is not None
    assert json.dumps(CALL.arguments).encode() in chat


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (500, EVENT_STREAM),
        (200, [("content-type", "application/json")]),
        (200, [*EVENT_STREAM, ("content-encoding", "gzip")]),
    ],
)
def test_only_a_whole_plain_stream_of_a_known_api_is_read(
    status: int, headers: list[tuple[str, str]]
) -> None:
    assert tap_for("/v1/messages", status, headers) is None
    assert tap_for("/v1/responses", status, headers) is None
    assert tap_for("/v1beta/models/g:generateContent", status, headers) is None
    assert tap_for("/v1/models", 200, EVENT_STREAM) is None  # no LLM API


def test_a_stream_cut_short_an_error_or_an_overlong_answer_is_none() -> None:
    data = stream("messages", TEXT)
    assert tapped("/v1/messages", data[: data.rindex(b"event: message_stop")], []) is None
    error = provider.sse({"type": "error", "error": {"type": "overloaded_error"}}, "error")
    assert (
        tapped("/v1/messages", data.replace(b"event: message_delta", error + b"event: x"), [])
        is None
    )
    long = provider.Reply(text="x" * (MAX_ANSWER + 1))
    assert tapped("/v1/messages", stream("messages", long), []) is None
    tap = AnswerTap("anthropic")
    tap.feed(data)
    tap.feed(b"data: more\n\n")  # bytes past the end: not a stream this reads
    assert tap.answer is None


def test_an_event_nested_past_the_parser_is_a_stream_not_read_never_an_error() -> None:
    """The tap reads the app's stream as it passes: an event nested past the JSON parser's
    depth makes no answer, and raises nothing into the answer's way."""
    for nested in (b"[" * 100_000, b'{"a":' * 100_000):
        tap = AnswerTap("anthropic")
        tap.feed(b"event: x\ndata: " + nested + b"\n\n")
        assert tap.answer is None


def test_a_version_3_edit_reads_back_exactly_and_only_against_its_answer() -> None:
    answer = tapped("/v1/messages", stream("messages", CALL), [])
    assert answer is not None
    message = {"role": "assistant", "content": provider.anthropic_message(CALL, "m", 1)["content"]}
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}, message]})
    made = cut([("x-a", "b")], body.encode(), "messages")
    assert made is not None
    assert made.answered  # the assistant message's segments
    ops: list[Op] = [Keep(0, 1), *(Inline(s) for s in made.segments[1:])]
    models = frozenset(
        n for n, index in enumerate(range(1, len(made.segments))) if index in made.answered
    )
    data = wire.encode_isolated("tb_" + "a" * 26, ops, answer=answer, answered=models)
    plain = wire.encode_isolated("tb_" + "a" * 26, ops)
    assert data.startswith(b'{"v":3,')
    assert len(data) < len(plain)
    header, blob = wire.read(data, 1 << 20)
    assert header.answer == answer_id(answer)
    assert wire.inline(header, blob, b"", None, answer) == made.segments[1:]
    with pytest.raises(DictionaryMismatchError):
        wire.inline(header, blob, b"", None, bytes(reversed(answer)))
    with pytest.raises(MalformedBodyError):  # a record of kind 3 in an edit without an answer
        isolated.unpack(blob, header.lengths, None)


@pytest.mark.parametrize(
    "header",
    [
        {"v": 3, "b": "tb_" + "a" * 26, "o": [0], "n": 0, "a": "XYZ"},
        {"v": 3, "b": None, "o": [0], "n": 0, "a": "0" * 16},  # an answer needs a base
        {"v": 2, "b": None, "o": [0], "n": 0, "a": "0" * 16},  # a member of version 3 only
    ],
)
def test_a_malformed_version_3_header_is_refused(header: dict[str, object]) -> None:
    with pytest.raises(MalformedBodyError):
        wire.read(json.dumps(header).encode() + b"\n", 1 << 20)


def _file(seed: int, lines: int) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "return", "value", "self", "import", "}", "])"]
    return "".join(
        (" " * rng.choice([0, 4, 8])) + " ".join(rng.choices(words, k=6)) + "\n"
        for _ in range(lines)
    )


def test_the_long_window_cuts_long_messages_where_their_content_says() -> None:
    """A file read twice, in two messages with different openings: cut again at the same
    places, so nearly every piece of the second is one of the first; the cut stays exact."""
    text = _file(1, 600)
    body = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "tool", "tool_call_id": "a", "content": text},
                {"role": "tool", "tool_call_id": "bbbbbbbbbbbbbbbbbbb", "content": "see:\n" + text},
            ],
        }
    ).encode()
    plain = cut([], body, "messages")
    made = cut([], body, "messages", window=True)
    assert plain is not None
    assert made is not None
    assert made.body == body == plain.body
    assert len(made.segments) > len(plain.segments) + 10
    first = [s for s, o in zip(made.segments, made.owners, strict=True) if o == 0]
    second = [s for s, o in zip(made.segments, made.owners, strict=True) if o == 1]
    shared = set(first) & set(second)
    assert sum(map(len, shared)) > 0.9 * len(json.dumps(text))
    assert all(len(s) >= 512 for s in first[:-1])  # none shorter than WINDOW_MIN but the last


def test_a_run_of_one_message_travels_as_one_frame_and_reads_back() -> None:
    pieces = [f"piece {n}: ".encode() + _file(n, 40).encode() for n in range(6)]
    alone = isolated.pack(pieces)
    joined = isolated.pack(pieces, runs=[(0, 6)])
    assert len(joined) < len(alone)
    lengths = [len(p) for p in pieces]
    assert isolated.unpack(joined, lengths, None, runs=True) == pieces
    with pytest.raises(MalformedBodyError):  # kind 4 only in an edit of version 3
        isolated.unpack(joined, lengths, None)


def test_interleaved_deltas_of_several_blocks_make_each_block_whole() -> None:
    """Thinking, its signature and text streamed in thousands of deltas, interleaved:
    each block's text is its deltas joined (kept as pieces and joined once, so a long
    answer costs its length, not its length squared)."""

    def event(kind: str, data: dict[str, object]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    starts = [
        event("content_block_start", {"type": "content_block_start", "index": 0,
              "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        event("content_block_start", {"type": "content_block_start", "index": 1,
              "content_block": {"type": "text", "text": "pre:"}}),
    ]  # fmt: skip
    deltas = []
    for n in range(3000):
        for index, kind, field in ((0, "thinking_delta", "thinking"), (1, "text_delta", "text")):
            delta = {"type": kind, field: f"{field[0]}{n},"}
            deltas.append(event("content_block_delta", {"type": "content_block_delta",
                                "index": index, "delta": delta}))  # fmt: skip
    signed = {"type": "signature_delta", "signature": "sig"}
    deltas.append(event("content_block_delta", {"type": "content_block_delta", "index": 0,
                        "delta": signed}))  # fmt: skip
    tap = AnswerTap("anthropic")
    for data in [*starts, *deltas, event("message_stop", {"type": "message_stop"})]:
        tap.feed(data)
    assert tap.answer is not None
    message = json.loads(tap.answer.split(b"\n")[0])
    thinking, text = message["content"]
    assert thinking["thinking"] == "".join(f"t{n}," for n in range(3000))
    assert thinking["signature"] == "sig"
    assert text["text"] == "pre:" + "".join(f"t{n}," for n in range(3000))


def _sse(data: dict[str, object]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def test_a_tool_input_nested_past_the_parser_is_no_answer_never_an_error() -> None:
    """A tool input the model streamed nested deeper than the JSON parser goes: the stream
    ended whole, yet it makes no answer, and `answer` raises nothing into the way of the
    piece that ends the stream (the gateway reads it before it sends that piece on)."""
    tap = AnswerTap("anthropic")
    start = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}
    tap.feed(_sse({"type": "content_block_start", "index": 0, "content_block": start}))
    deep = {"type": "input_json_delta", "partial_json": "[" * 5000 + "]" * 5000}
    tap.feed(_sse({"type": "content_block_delta", "index": 0, "delta": deep}))
    assert tap.feed(_sse({"type": "message_stop"}))
    assert tap.answer is None


@pytest.mark.parametrize(
    "event",
    [
        {"choices": 1},
        {"choices": [{"delta": {"tool_calls": 7}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"name": 1, "arguments": 2}}]}}]},
    ],
)
def test_a_chat_event_of_odd_shape_is_a_stream_not_read_never_an_error(
    event: dict[str, object],
) -> None:
    """`feed` runs in the answer's way: an event of a shape no answer has makes none (the
    stream is not one this reads) and raises nothing, so the stream passes on as it came."""
    tap = AnswerTap("openai-chat")
    tap.feed(_sse(event))
    tap.feed(b"data: [DONE]\n\n")
    assert tap.answer is None or json.loads(tap.answer.split(b"\n")[0])["role"] == "assistant"


def test_a_tool_name_streamed_in_many_pieces_is_the_pieces_joined() -> None:
    """A function name streamed in thousands of pieces is kept as pieces and joined once
    (adding each to the name so far made a stream of name pieces cost its length squared:
    an 8 MiB stream held the event loop for half a minute)."""
    tap = AnswerTap("openai-chat")
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "run_"}}
    tap.feed(_sse({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}))
    for n in range(3000):
        piece = {"index": 0, "function": {"name": f"{n}_", "arguments": f"{n},"}}
        tap.feed(_sse({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]}))
    assert tap.feed(b"data: [DONE]\n\n")
    assert tap.answer is not None
    message = json.loads(tap.answer.split(b"\n")[0])
    function = message["tool_calls"][0]["function"]
    assert function["name"] == "run_" + "".join(f"{n}_" for n in range(3000))
    assert function["arguments"] == "".join(f"{n}," for n in range(3000))


# --- the stream's edges (review: answer tap edges) ---------------------------------------------
# The same streams and answer bytes are in client_sdk/js/test/answer.test.ts ("the stream's
# edges"): relay or SDK and gateway must make the same bytes, however the stream is cut.

CHAT_EDGE = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,'
    b'"id":"call_1","type":"function","function":{"name":"run","arguments":""}}]}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
    b'{"arguments":"{\\"a\\": 1}"}}]}}]}\n\n'
    b"data: [DONE]\n\n"
)
CHAT_EDGE_ANSWER = (
    b'{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",'
    b'"function":{"name":"run","arguments":"{\\"a\\": 1}"}}]}\n{"a": 1}'
)
ANTHROPIC_EDGE = (
    b"event: content_block_start\r"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\r\r'
    b"event: content_block_delta\r"
    b'data: {"type":"content_block_delta","index":0,\r\n'
    b'data: "delta":{"type":"text_delta","text":"h\\u00e9"}}\n\r'
    b'data: {"type":"message_stop"}\r\n\r\n'
)
ANTHROPIC_EDGE_ANSWER = '{"role":"assistant","content":[{"type":"text","text":"hé"}]}'.encode()
RUNS = b"\n\r\n\r\r: keep-alive\r\n:\n\n"  # blank and comment lines, stepped over unread
ANTHROPIC_RUNS = RUNS + ANTHROPIC_EDGE.replace(
    b'"index":0,\r\n', b'"index":0,\r\n: within an event\revent: x\n'
).replace(b'data: {"type":"message_stop"}', RUNS + b'data: {"type":"message_stop"}')
BOM = b"\xef\xbb\xbf"
EDGE_CASES = [
    ("openai-chat", BOM + CHAT_EDGE, CHAT_EDGE_ANSWER),  # a BOM before the first event
    ("openai-chat", CHAT_EDGE.replace(b"\n", b"\r"), CHAT_EDGE_ANSWER),  # CR-only line ends
    ("openai-chat", BOM + CHAT_EDGE.replace(b"\n", b"\r\n"), CHAT_EDGE_ANSWER),
    ("anthropic", ANTHROPIC_EDGE, ANTHROPIC_EDGE_ANSWER),  # CR, LF, CRLF and LF CR mixed
    ("anthropic", BOM + ANTHROPIC_EDGE, ANTHROPIC_EDGE_ANSWER),
    ("anthropic", ANTHROPIC_RUNS, ANTHROPIC_EDGE_ANSWER),  # blank and comment runs
    ("anthropic", BOM + ANTHROPIC_RUNS, ANTHROPIC_EDGE_ANSWER),
    ("openai-chat", RUNS + CHAT_EDGE.replace(b"\n\n", b"\n" + RUNS), CHAT_EDGE_ANSWER),
]


def taken(fmt: str, pieces: list[bytes]) -> bytes | None:
    """The answer as relay, SDK and gateway take it: when `feed` says the answer ended (at
    most once), else none."""
    tap = AnswerTap(fmt)
    answers = [tap.answer for piece in pieces if tap.feed(piece)]
    assert len(answers) <= 1
    return answers[0] if answers else None


def cuts(data: bytes) -> list[list[bytes]]:
    """`data` whole, byte by byte, and in two pieces at every byte (an empty one between)."""
    return [[data], [data[n : n + 1] for n in range(len(data))]] + [
        [data[:n], b"", data[n:]] for n in range(len(data) + 1)
    ]


@pytest.mark.parametrize(("fmt", "data", "expected"), EDGE_CASES)
def test_a_bom_and_any_sse_line_end_make_the_answer_at_every_cut(
    fmt: str, data: bytes, expected: bytes
) -> None:
    """A UTF-8 BOM before the first line (it made the first line no `data:` line: the answer
    lost its first event, a tool call's id and name) and lines ended by CR alone (the stream
    was held whole, no answer) or by a CRLF cut between two pieces."""
    for pieces in cuts(data):
        assert taken(fmt, pieces) == expected, [len(p) for p in pieces]


def test_only_the_bytes_up_to_the_end_count_against_max_stream() -> None:
    """Bytes after the end event in the piece that holds it count for nothing: whole, a
    stream whose blank lines after the end cross MAX_STREAM made no answer, cut, it made one."""
    data = CHAT_EDGE + b"\n" * (MAX_STREAM - len(CHAT_EDGE) + 10)
    end = len(CHAT_EDGE)
    for pieces in ([data], [data[:end], data[end:]], [data[: end - 1], data[end - 1 :]]):
        assert taken("openai-chat", pieces) == CHAT_EDGE_ANSWER
    # the end line ended by the CR of a CRLF at the limit's last byte: read; one byte later, not
    end_line = CHAT_EDGE.replace(b"\n", b"\r\n")
    for extra, expected in ((0, CHAT_EDGE_ANSWER), (1, None)):
        padding = b":" + b"-" * (MAX_STREAM - len(end_line) - 1 + extra) + b"\n"  # a comment
        data = padding + end_line
        at = len(data) - 1  # the last LF, past the limit
        for pieces in ([data], [data[:at], data[at:]], [padding, end_line]):
            assert taken("openai-chat", pieces) == expected, (extra, [len(p) for p in pieces])


# --- what a tap holds (review: answer taps' memory) --------------------------------------------
# The same streams and give-up points are in client_sdk/js/test/answer.test.ts ("what a tap
# holds"): both sides give up at the same event, so they still agree on every answer.

TEXT_START = (
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
)


def _text_delta(text: str) -> bytes:
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    return _sse(delta)


def test_a_tap_gives_up_once_what_it_holds_can_only_make_an_answer_over_max_answer() -> None:
    """Text deltas of 1000 bytes each: the 262nd still may make an answer (262,000 bytes of
    text, within MAX_ANSWER), the 263rd cannot: the tap gives up there, its memory dropped
    (it held the whole 8 MiB stream's text until its end before)."""
    tap = AnswerTap("anthropic")
    tap.feed(TEXT_START)
    delta = _text_delta("x" * 1000)
    for _ in range(262):
        tap.feed(delta)
    assert not tap.failed
    tap.feed(delta)
    assert tap.failed
    tap = AnswerTap("anthropic")
    data = TEXT_START + delta * ((MAX_STREAM - len(TEXT_START)) // len(delta))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for at in range(0, len(data), 1 << 16):
            tap.feed(data[at : at + (1 << 16)])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tap.failed
    assert held < 64 << 10, held  # what is left of the tap: ~7.7 MiB before


def test_a_chat_tap_counts_tool_arguments_twice_and_every_call() -> None:
    """A call's arguments are in the answer twice (in the message, then as streamed): 131
    pieces of 1000 bytes may make one, 132 cannot. A flood of calls each makes at least
    `{"id":"","type":"custom","custom":{"name":"","input":""}}` (57 bytes, a function
    call's 65), a comma and a line end: 4443 of them may make an answer, 4444 cannot."""
    tap = AnswerTap("openai-chat")
    piece = {"index": 0, "function": {"arguments": "y" * 1000}}
    event = _sse({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    for _ in range(131):
        tap.feed(event)
    assert not tap.failed
    tap.feed(event)
    assert tap.failed
    tap = AnswerTap("openai-chat")
    for n in range(4444):
        assert not tap.failed
        tap.feed(_sse({"choices": [{"delta": {"tool_calls": [{"index": n}]}}]}))
    assert tap.failed


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat"])
def test_an_answer_of_exactly_max_answer_is_still_one(fmt: str) -> None:
    """The rule counts only bytes certain to be in the answer: text that the answer escapes
    (quotes, line ends, a control character), non-ASCII and a lone surrogate count for less
    than they make, so an answer of MAX_ANSWER bytes is still made, one byte more is none."""
    pieces = ['say "hi"\n', "\x01\u00e9\U0001f600", "\ud800", "z" * 1000]

    def answer(fill: int) -> bytes | None:
        if fmt == "anthropic":
            events = [TEXT_START, *(_text_delta(p) for p in [*pieces, "w" * fill])]
            end = _sse({"type": "message_stop"})
        else:
            events = [_sse({"choices": [{"delta": {"content": p}}]}) for p in [*pieces, "w" * fill]]
            end = b"data: [DONE]\n\n"
        tap = AnswerTap(fmt)
        for data in [*events, end]:
            tap.feed(data)
        return tap.answer

    made = answer(0)
    assert made is not None
    full = answer(MAX_ANSWER - len(made))
    assert full is not None
    assert len(full) == MAX_ANSWER
    assert answer(MAX_ANSWER - len(made) + 1) is None


# --- answer taps for every call shape (review: answer taps for every call shape) ---------------
# The streams are tests/js_answer_vectors.py's: vectors.json carries the bytes Python makes of
# each to client_sdk/js/test/answer.test.ts ("answer vectors"), which asserts JS makes the same.

ANSWERS = {name: (fmt, data) for name, fmt, data in js_answer_vectors.CASES}


def _made(name: str) -> bytes | None:
    return js_answer_vectors.made(*ANSWERS[name])


def test_a_chat_custom_tool_call_is_the_call_the_agent_writes_back() -> None:
    """A freeform tool's call streams `custom: {name, input}`, not `function`: it is written
    back as `{"type":"custom","custom":{"name":..,"input":..}}`, its input then as streamed
    (it was a function call of no name and no arguments before)."""
    patch = js_answer_vectors.PATCH
    call = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": patch}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    expected = json.dumps(message, separators=(",", ":")) + "\n" + patch
    assert _made("chat: a custom (freeform) tool call, its input in pieces") == expected.encode()
    both = _made("chat: parallel calls, a function and a custom one, with text")
    assert both == (
        b'{"role":"assistant","content":"Both: ","tool_calls":['
        b'{"id":"call_f","type":"function","function":{"name":"ls","arguments":"{}"}},'
        b'{"id":"call_c","type":"custom","custom":{"name":"patch","input":"x"}}]}\n{}\nx'
    )
    late = _made("chat: a custom call whose type comes after its input")
    assert late == (
        b'{"role":"assistant","content":null,"tool_calls":[{"id":"","type":"custom",'
        b'"custom":{"name":"","input":"a"}}]}\na'
    )


@pytest.mark.parametrize(
    "name",
    [
        "chat: a call that is both a function and a custom one: none",
        "chat: a call typed function that streams a custom input: none",
        "chat: event data in UTF-16: none",
        "anthropic: a text delta of null: none",
        "anthropic: a block whose text is a number: none",
        "anthropic: a partial_json that is a number: none",
    ],
)
def test_a_shape_the_tap_does_not_model_is_no_answer(name: str) -> None:
    """No answer, in Python as in JS, rather than bytes only one side makes (Python took the
    `str()` of a null or numeric piece, decoded UTF-16 data, wrote a mixed call as a function)."""
    assert _made(name) is None


def test_a_chat_refusal_is_in_the_answer() -> None:
    """A refusal streams as `delta.refusal`: the message the agent writes back carries it (it
    made `"content":""` before, the refusal lost)."""
    assert _made("chat: a refusal") == (
        b'{"role":"assistant","content":null,"refusal":"I can\'t help with that."}'
    )
    assert _made("chat: a refusal after text") == (
        b'{"role":"assistant","content":"Well.","refusal":"No."}'
    )


def test_a_surrogate_pair_is_one_character_however_it_came() -> None:
    """Two halves of a surrogate pair, in two deltas or as two three-byte sequences, make one
    four-byte character, as in JS (six bytes here before: the next edit refused)."""
    assert _made("chat: a surrogate pair split between two deltas") == (
        '{"role":"assistant","content":"\U0001f600 ok"}'.encode()
    )
    assert _made("anthropic: a surrogate pair as two three-byte sequences") == (
        '{"role":"assistant","content":[{"type":"text","text":"\U0001f600"}]}'.encode()
    )


def test_a_block_that_starts_whole_counts_what_it_holds() -> None:
    """A block that comes whole in its `content_block_start` (a `web_search_tool_result`, or a
    text that starts with its text) counts its bytes as the tap holds it: 5 blocks of 60,000
    bytes may make an answer, the 5th cannot; the tap gives up there, its memory dropped (each
    counted 3 bytes before, and the tap held the whole 8 MiB stream's blocks until its end)."""
    tap = AnswerTap("anthropic")
    results = [{"type": "web_search_result", "url": "u", "encrypted_content": "e" * 60_000}]
    for index in range(4):
        block = {"type": "web_search_tool_result", "tool_use_id": "s", "content": results}
        tap.feed(_sse({"type": "content_block_start", "index": index, "content_block": block}))
    assert not tap.failed
    tap.feed(_sse({"type": "content_block_start", "index": 4, "content_block": block}))
    assert tap.failed
    tap = AnswerTap("anthropic")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(120):  # ~7.2 MiB of blocks
            text = {"type": "text", "text": "x" * 60_000}
            tap.feed(_sse({"type": "content_block_start", "index": index, "content_block": text}))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tap.failed
    assert held < 256 << 10, held
