"""Property tests: however a stream cuts and interleaves the argument text of its tool calls,
the calls that come out are the same.

Hypothesis plans a few tool calls (names, ids, JSON-object arguments with nested values,
unicode and escapes), renders each call's argument text as some formatting of its JSON, cuts
that text at arbitrary points, and renders the pieces as the event stream of each provider
that streams argument text (OpenAI Chat and Responses, Anthropic, Cohere, Bedrock). The split
stream must give exactly the calls of the unsplit one, with the planned arguments.
Interleaving the pieces of parallel calls (OpenAI Chat by `tool_calls[].index`, Responses by
`output_index`, and ToolChunks fed straight to a ToolBuffer) must change nothing either.
Provider calls open in the order the model generates them (only their later fragments
interleave); ToolChunks interleave freely. OpenAI Chat streams leave out the rare cuts where
a delta starts with all the text before it: a cumulative server sends exactly that, so the
adapter has to guess (it prefers the reading under which the arguments parse; the pinned
test below is the case it decides right).
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from toolref.streaming import CallStatus, ToolBuffer, ToolCall, ToolChunk, accumulate

SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

# --- planned calls ------------------------------------------------------------------------

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_TRICKY = st.sampled_from(
    [
        "",
        "\U0001f600",
        "Zoë 🌍 日本語",
        "\u2028\u2029",
        "\x00\x1f\x7f",
        "tab\tnew\nline\r",
        '"quoted"',
        "back\\slash",
        '{"a": ',  # JSON-looking text inside a string
        "\\u00e9",
        "}]",
    ]
)
_STRINGS = st.one_of(_TEXT, _TRICKY)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _STRINGS,
)
_KEYS = st.one_of(_STRINGS, st.sampled_from(["path", "a", "", "\U0001f511", "items"]))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(_KEYS, _VALUES, max_size=4)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,15}", fullmatch=True)
ID_SUFFIXES = st.text(string.ascii_letters + string.digits, min_size=1, max_size=8)


@dataclass(frozen=True)
class Planned:
    """One tool call as the model meant it, and the pieces its argument text streams in."""

    id: str
    name: str
    arguments: dict[str, Any]
    text: str
    pieces: tuple[str, ...]

    def whole(self) -> Planned:
        return replace(self, pieces=(self.text,))


def cut(text: str, points: Sequence[int]) -> tuple[str, ...]:
    """`text` cut at each of `points` (positions strictly inside it): non-empty pieces."""
    bounds = [0, *sorted({p for p in points if 0 < p < len(text)}), len(text)]
    return tuple(text[a:b] for a, b in pairwise(bounds))


@st.composite
def planned_call(draw: st.DrawFn, position: int) -> Planned:
    arguments = draw(ARGUMENTS)
    text = json.dumps(
        arguments,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.sampled_from([None, 1])),
        separators=draw(st.sampled_from([None, (",", ":")])),
    )
    points = draw(st.lists(st.integers(0, len(text)), max_size=12))
    return Planned(
        id=f"call_{position}_{draw(ID_SUFFIXES)}",
        name=draw(NAMES),
        arguments=arguments,
        text=text,
        pieces=cut(text, points),
    )


@st.composite
def planned_calls(draw: st.DrawFn, min_size: int = 1, max_size: int = 3) -> list[Planned]:
    count = draw(st.integers(min_size, max_size))
    return [draw(planned_call(position)) for position in range(count)]


def check(calls: list[ToolCall], planned: list[Planned]) -> None:
    """The calls are the planned ones, complete, in plan order."""
    assert [(c.id, c.name) for c in calls] == [(p.id, p.name) for p in planned]
    for call, plan in zip(calls, planned, strict=True):
        assert call.status is CallStatus.COMPLETE, call
        assert call.arguments == plan.arguments
        assert call.raw_arguments == plan.text
        assert call.runnable


def merge(sequences: Sequence[Sequence[Any]], rnd: random.Random) -> list[Any]:
    """One random interleaving of `sequences` that keeps each one's own order."""
    queues = [list(s) for s in sequences]
    merged: list[Any] = []
    while any(queues):
        queue = rnd.choice([q for q in queues if q])
        merged.append(queue.pop(0))
    return merged


def merge_starting_in_order(sequences: Sequence[Sequence[Any]], rnd: random.Random) -> list[Any]:
    """`merge`, but sequence k starts only after sequence k-1 has started, as calls open on
    the wire in the order the model generates them; the rest interleaves freely."""
    queues = [list(s) for s in sequences]
    merged: list[Any] = []
    started = 0
    while any(queues):
        choices = [k for k, q in enumerate(queues) if q and k <= started]
        k = rnd.choice(choices)
        merged.append(queues[k].pop(0))
        if k == started:
            started += 1
    return merged


# --- provider streams ---------------------------------------------------------------------


@dataclass
class Stream:
    """A rendered stream: events before the calls, each call's own events, events after."""

    before: list[Any]
    calls: list[list[Any]]
    after: list[Any]

    def sequential(self) -> list[Any]:
        return [*self.before, *(e for call in self.calls for e in call), *self.after]

    def interleaved(self, order: Callable[[Sequence[Sequence[Any]]], list[Any]]) -> list[Any]:
        return [*self.before, *order(self.calls), *self.after]


def chat_chunk(
    fragment: dict[str, Any] | None = None, *, finish: str | None = None, **delta: Any
) -> dict[str, Any]:
    if fragment is not None:
        delta["tool_calls"] = [fragment]
    return {
        "id": "chatcmpl-prop",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def openai_chat(
    planned: list[Planned], *, first_in_opening: bool = True, cumulative: bool = False
) -> Stream:
    """Chat Completions: the opening fragment has id, type and name (and maybe the first
    piece); then one fragment per piece, each the piece or, for cumulative servers, all the
    text so far."""
    calls = []
    for index, plan in enumerate(planned):
        pieces = list(plan.pieces)
        opening = pieces.pop(0) if first_in_opening else ""
        sent = opening
        events = [
            chat_chunk(
                {
                    "index": index,
                    "id": plan.id,
                    "type": "function",
                    "function": {"name": plan.name, "arguments": opening},
                }
            )
        ]
        for piece in pieces:
            sent += piece
            arguments = sent if cumulative else piece
            events.append(chat_chunk({"index": index, "function": {"arguments": arguments}}))
        calls.append(events)
    return Stream(
        before=[chat_chunk(role="assistant", content=None)],
        calls=calls,
        after=[chat_chunk(finish="tool_calls"), "[DONE]"],
    )


def as_sse(events: list[Any]) -> list[str]:
    return ["data: " + (e if isinstance(e, str) else json.dumps(e)) for e in events]


def looks_cumulative(plan: Planned, first_in_opening: bool) -> bool:
    """Whether a delta of `plan` starts with all the text before it (and is longer): the
    OpenAI Chat adapter may take it for a cumulative resend (see the module docstring)."""
    pieces = plan.pieces if first_in_opening else ("", *plan.pieces)
    sent = pieces[0]
    for piece in pieces[1:]:
        if sent and len(piece) > len(sent) and piece.startswith(sent):
            return True
        sent += piece
    return False


RESPONSE_ID = "resp_prop"


def responses_item(plan: Planned, output_index: int, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{output_index}",
        "call_id": plan.id,
        "name": plan.name,
        "arguments": arguments,
        "status": status,
    }


def openai_responses(planned: list[Planned], *, final_events: bool = True) -> Stream:
    """Responses: output_item.added, argument deltas and (unless `final_events` is off, as
    when a gateway drops them) the .done arguments and output_item.done. Output 0 is a
    reasoning item, so calls sit at output_index 1, 2, ..."""
    calls = []
    for position, plan in enumerate(planned):
        output_index = position + 1
        events: list[Any] = [
            {
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": responses_item(plan, output_index, "", "in_progress"),
            }
        ]
        events += [
            {
                "type": "response.function_call_arguments.delta",
                "output_index": output_index,
                "item_id": f"fc_{output_index}",
                "delta": piece,
            }
            for piece in plan.pieces
        ]
        if final_events:
            events += [
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": output_index,
                    "item_id": f"fc_{output_index}",
                    "arguments": plan.text,
                },
                {
                    "type": "response.output_item.done",
                    "output_index": output_index,
                    "item": responses_item(plan, output_index, plan.text, "completed"),
                },
            ]
        calls.append(events)
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    return Stream(
        before=[
            {"type": "response.created", "response": {"id": RESPONSE_ID, "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        ],
        calls=calls,
        after=[
            {
                "type": "response.completed",
                "response": {"id": RESPONSE_ID, "status": "completed", "output": []},
            }
        ],
    )


def anthropic(planned: list[Planned]) -> Stream:
    """Messages: a text block at 0, then one tool_use block per call."""
    calls = []
    for position, plan in enumerate(planned):
        block = position + 1
        calls.append(
            [
                {
                    "type": "content_block_start",
                    "index": block,
                    "content_block": {
                        "type": "tool_use",
                        "id": plan.id,
                        "name": plan.name,
                        "input": {},
                    },
                },
                *(
                    {
                        "type": "content_block_delta",
                        "index": block,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                    for piece in plan.pieces
                ),
                {"type": "content_block_stop", "index": block},
            ]
        )
    return Stream(
        before=[
            {
                "type": "message_start",
                "message": {"id": "msg_prop", "type": "message", "role": "assistant"},
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
            {"type": "content_block_stop", "index": 0},
            {"type": "ping"},
        ],
        calls=calls,
        after=[
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            {"type": "message_stop"},
        ],
    )


def cohere(planned: list[Planned]) -> Stream:
    """Cohere v2: a start/delta.../end triple per call."""
    calls = []
    for index, plan in enumerate(planned):
        start_call = {
            "id": plan.id,
            "type": "function",
            "function": {"name": plan.name, "arguments": ""},
        }
        calls.append(
            [
                {
                    "type": "tool-call-start",
                    "index": index,
                    "delta": {"message": {"tool_calls": start_call}},
                },
                *(
                    {
                        "type": "tool-call-delta",
                        "index": index,
                        "delta": {"message": {"tool_calls": {"function": {"arguments": piece}}}},
                    }
                    for piece in plan.pieces
                ),
                {"type": "tool-call-end", "index": index},
            ]
        )
    return Stream(
        before=[
            {"id": "cohere-prop", "type": "message-start", "delta": {"message": {}}},
            {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will."}}},
        ],
        calls=calls,
        after=[{"type": "message-end", "delta": {"finish_reason": "TOOL_CALL"}}],
    )


def bedrock(planned: list[Planned]) -> Stream:
    """ConverseStream: a text block at 0, then a toolUse block per call."""
    calls = []
    for position, plan in enumerate(planned):
        block = position + 1
        tool_use = {"toolUseId": plan.id, "name": plan.name}
        calls.append(
            [
                {"contentBlockStart": {"start": {"toolUse": tool_use}, "contentBlockIndex": block}},
                *(
                    {
                        "contentBlockDelta": {
                            "delta": {"toolUse": {"input": piece}},
                            "contentBlockIndex": block,
                        }
                    }
                    for piece in plan.pieces
                ),
                {"contentBlockStop": {"contentBlockIndex": block}},
            ]
        )
    text = {"contentBlockDelta": {"delta": {"text": "Looking."}, "contentBlockIndex": 0}}
    return Stream(
        before=[
            {"messageStart": {"role": "assistant"}},
            text,
            {"contentBlockStop": {"contentBlockIndex": 0}},
        ],
        calls=calls,
        after=[
            {"messageStop": {"stopReason": "tool_use"}},
            {"metadata": {"usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}}},
        ],
    )


RENDERERS: dict[str, Callable[[list[Planned]], Stream]] = {
    "openai_chat": openai_chat,
    "openai_responses": openai_responses,
    "anthropic": anthropic,
    "cohere": cohere,
    "bedrock": bedrock,
}


# --- split streams ------------------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(RENDERERS))
@SETTINGS
@given(planned=planned_calls())
def test_split_arguments_give_the_calls_of_the_unsplit_stream(
    provider: str, planned: list[Planned]
) -> None:
    if provider == "openai_chat":
        assume(not any(looks_cumulative(p, True) for p in planned))
    render = RENDERERS[provider]
    whole = accumulate(render([p.whole() for p in planned]).sequential(), provider)
    split = accumulate(render(planned).sequential(), provider)
    assert split == whole
    check(split, planned)


@SETTINGS
@given(planned=planned_calls(), first_in_opening=st.booleans(), sse=st.booleans())
def test_openai_chat_opening_fragment_and_sse_text_change_nothing(
    planned: list[Planned], first_in_opening: bool, sse: bool
) -> None:
    assume(not any(looks_cumulative(p, first_in_opening) for p in planned))
    whole = accumulate(openai_chat([p.whole() for p in planned]).sequential(), "openai_chat")
    events = openai_chat(planned, first_in_opening=first_in_opening).sequential()
    split = accumulate(as_sse(events) if sse else events, "openai_chat")
    assert split == whole
    check(split, planned)


@SETTINGS
@given(planned=planned_calls(), final_events=st.booleans())
def test_responses_deltas_alone_give_the_final_arguments(
    planned: list[Planned], final_events: bool
) -> None:
    """With the .done events the final text wins anyway; without them (a gateway that drops
    them) the deltas alone must add up to the same calls."""
    whole = accumulate(
        openai_responses([p.whole() for p in planned]).sequential(), "openai_responses"
    )
    split = accumulate(
        openai_responses(planned, final_events=final_events).sequential(), "openai_responses"
    )
    check(split, planned)
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in split] == [
        (c.id, c.name, c.arguments, c.raw_arguments) for c in whole
    ]
    assert [c.meta["output_index"] for c in split] == list(range(1, len(planned) + 1))
    assert all(c.parent_id == RESPONSE_ID for c in split)


@SETTINGS
@given(planned=planned_calls(), first_in_opening=st.booleans())
def test_openai_chat_cumulative_arguments_give_the_delta_result(
    planned: list[Planned], first_in_opening: bool
) -> None:
    """Servers that resend all the text so far in every chunk (DeepSeek/Qianfan, GLM)."""
    assume(not any(looks_cumulative(p, first_in_opening) for p in planned))
    deltas = openai_chat(planned, first_in_opening=first_in_opening).sequential()
    cumulative = openai_chat(planned, first_in_opening=first_in_opening, cumulative=True)
    assert accumulate(cumulative.sequential(), "openai_chat") == accumulate(deltas, "openai_chat")
    check(accumulate(cumulative.sequential(), "openai_chat"), planned)


def test_openai_chat_delta_that_repeats_the_text_so_far_is_still_a_delta() -> None:
    plan = Planned(
        id="call_1",
        name="f",
        arguments={"a": {"a": 1}},
        text='{"a": {"a": 1}}',
        pieces=('{"a": ', '{"a": 1}}'),
    )
    assert looks_cumulative(plan, True)
    check(accumulate(openai_chat([plan]).sequential(), "openai_chat"), [plan])


# --- interleaved parallel calls -----------------------------------------------------------


@SETTINGS
@given(planned=planned_calls(2, 4), rnd=st.randoms(use_true_random=False))
def test_openai_chat_interleaved_calls_give_the_sequential_result(
    planned: list[Planned], rnd: random.Random
) -> None:
    assume(not any(looks_cumulative(p, True) for p in planned))
    stream = openai_chat(planned)
    sequential = accumulate(stream.sequential(), "openai_chat")
    interleaved = stream.interleaved(lambda calls: merge_starting_in_order(calls, rnd))
    assert accumulate(interleaved, "openai_chat") == sequential
    check(sequential, planned)


@SETTINGS
@given(
    planned=planned_calls(2, 4),
    final_events=st.booleans(),
    rnd=st.randoms(use_true_random=False),
)
def test_responses_interleaved_calls_give_the_sequential_result(
    planned: list[Planned], final_events: bool, rnd: random.Random
) -> None:
    stream = openai_responses(planned, final_events=final_events)
    sequential = accumulate(stream.sequential(), "openai_responses")
    interleaved = stream.interleaved(lambda calls: merge_starting_in_order(calls, rnd))
    assert accumulate(interleaved, "openai_responses") == sequential
    check(sequential, planned)


@SETTINGS
@given(
    planned=planned_calls(2, 4),
    rnd=st.randoms(use_true_random=False),
)
def test_openai_chat_calls_opening_out_of_order_are_the_same_calls(
    planned: list[Planned], rnd: random.Random
) -> None:
    """Even when a later index opens first, every call comes out whole (the adapter numbers
    calls in the order they open, so only `index` and the order may differ)."""
    assume(not any(looks_cumulative(p, True) for p in planned))
    stream = openai_chat(planned)
    calls = accumulate(stream.interleaved(lambda c: merge(c, rnd)), "openai_chat")
    by_id = sorted(calls, key=lambda c: c.id)
    check([replace(c, index=0) for c in by_id], sorted(planned, key=lambda p: p.id))


def chunks_of(plan: Planned, turn: int, index: int, close: bool) -> list[ToolChunk]:
    pieces = list(plan.pieces)
    chunks = [ToolChunk(turn=turn, index=index, id=plan.id, name=plan.name, args_delta=pieces[0])]
    chunks += [ToolChunk(turn=turn, index=index, args_delta=piece) for piece in pieces[1:]]
    if close:
        chunks.append(ToolChunk(turn=turn, index=index, done=True, meta={"closed": index}))
    return chunks


@SETTINGS
@given(
    planned=planned_calls(2, 5),
    turns=st.lists(st.integers(0, 2), min_size=5, max_size=5),
    closes=st.lists(st.booleans(), min_size=5, max_size=5),
    rnd=st.randoms(use_true_random=False),
)
def test_interleaved_chunks_give_the_sequential_result(
    planned: list[Planned], turns: list[int], closes: list[bool], rnd: random.Random
) -> None:
    """ToolChunks straight into a ToolBuffer: calls of several turns, some closed by their
    own chunk and the rest by their turn's finish, in any interleaving."""
    turns = turns[: len(planned)]
    per_call = [chunks_of(plan, turns[k], k, closes[k]) for k, plan in enumerate(planned)]
    finishes = [ToolChunk(turn=t, done=True, finish_reason="stop") for t in sorted(set(turns))]

    def run(chunks: list[ToolChunk]) -> list[ToolCall]:
        buffer = ToolBuffer(progress_interval=None)
        buffer.feed_all([*chunks, *finishes])
        assert buffer.has_tool_calls
        return buffer.close()

    sequential = run([c for call in per_call for c in call])
    assert run(merge(per_call, rnd)) == sequential
    expected = sorted(zip(turns, range(len(planned)), planned, strict=True), key=lambda t: t[:2])
    check(sequential, [plan for _, _, plan in expected])
    assert [(c.turn, c.index) for c in sequential] == [(t, k) for t, k, _ in expected]
