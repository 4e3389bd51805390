"""OpenAI Chat Completions streams: the quirks of OpenAI-compatible servers (one test per row
of the table in notes/streaming.md §1.5), finish_reason handling (§1.4) and the failures of
naive accumulators (§7.1). Events are the wire dicts an SSE decoder gives."""

from __future__ import annotations

from typing import Any

import pytest

from toolref.streaming import (
    ABORTED,
    FILTERED,
    TRUNCATED,
    CallStatus,
    OpenAIChatAdapter,
    ToolBuffer,
    ToolCall,
    accumulate,
)
from toolref.wire.errors import UnusableToolCallError

NO_INDEX = object()  # `call(index=NO_INDEX)`: the fragment has no "index" key at all


def call(
    index: object = 0,
    call_id: object = None,
    name: str | None = None,
    args: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """One `delta.tool_calls[]` entry with only the keys given (like the wire, not the SDK)."""
    fragment: dict[str, Any] = {}
    if index is not NO_INDEX:
        fragment["index"] = index
    if call_id is not None:
        fragment["id"] = call_id
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
        fragment["type"] = "function"
    if args is not None:
        function["arguments"] = args
    if function:
        fragment["function"] = function
    fragment.update(extra)
    return fragment


def ev(
    *calls: dict[str, Any], finish: str | None = None, choice: int = 0, chunk_id: str = "chatcmpl-1"
) -> dict[str, Any]:
    """One `chat.completion.chunk` with one choice."""
    delta: dict[str, Any] = {"tool_calls": list(calls)} if calls else {}
    return {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": "test-model",
        "choices": [{"index": choice, "delta": delta, "finish_reason": finish}],
    }


def run(events: list[Any]) -> list[ToolCall]:
    return accumulate(events, "openai_chat")


def buffered(events: list[Any]) -> ToolBuffer:
    """The buffer after the whole stream, for `has_tool_calls` and `finish_reasons`."""
    adapter = OpenAIChatAdapter()
    buffer = ToolBuffer(progress_interval=None)
    for event in events:
        buffer.feed_all(adapter.feed(event))
    buffer.feed_all(adapter.end())
    buffer.close()
    return buffer


def summary(calls: list[ToolCall]) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    return [(c.id, c.name, c.status.value, c.arguments) for c in calls]


DONE = [ev(finish="tool_calls"), "[DONE]"]


# --- §1.5: one test per quirk row ---


def test_quirk_whole_call_in_one_chunk() -> None:
    """Groq / Ollama / vLLM: one chunk per call. Old LiteLLM gave call 1 the arguments of
    calls 1 and 2 and call 3 '{}' (litellm#10034); Mistral puts several whole calls in one
    delta."""
    cities = ["Paris", "London", "Tokyo"]
    one_per_chunk = [
        ev(call(n, f"call_{n}", "get_weather", f'{{"city": "{city}"}}'))
        for n, city in enumerate(cities)
    ]
    one_delta = [
        ev(
            *(
                call(n, f"call_{n}", "get_weather", f'{{"city": "{city}"}}')
                for n, city in enumerate(cities)
            )
        )
    ]
    expected = [
        (f"call_{n}", "get_weather", "complete", {"city": city}) for n, city in enumerate(cities)
    ]
    assert summary(run([*one_per_chunk, *DONE])) == expected
    assert summary(run([*one_delta, *DONE])) == expected


def test_quirk_every_parallel_call_at_index_0() -> None:
    """Ollama /v1 >= 0.20 sends whole calls all at index 0; gateways stream fragmented calls at
    index 0. A new id opens a new call, and id-less fragments go to the latest call (LangChain
    sent them to the first)."""
    whole = [
        ev(call(0, "call_a", "write_file", '{"path": "a.txt"}')),
        ev(call(0, "call_b", "write_file", '{"path": "b.txt"}')),
        ev(call(0, "call_c", "write_file", '{"path": "c.txt"}')),
    ]
    calls = run([*whole, *DONE])
    assert summary(calls) == [
        (f"call_{x}", "write_file", "complete", {"path": f"{x}.txt"}) for x in "abc"
    ]
    assert [c.index for c in calls] == [0, 1, 2]

    fragmented = [
        ev(call(0, "call_a", "write_file", "")),
        ev(call(0, args='{"path": "a.txt"}')),
        ev(call(0, "call_b", "write_file", "")),
        ev(call(0, args='{"path": ')),
        ev(call(0, args='"b.txt"}')),
    ]
    assert summary(run([*fragmented, *DONE])) == [
        ("call_a", "write_file", "complete", {"path": "a.txt"}),
        ("call_b", "write_file", "complete", {"path": "b.txt"}),
    ]


def test_quirk_index_missing() -> None:
    """Gemini's compatible endpoint and Ollama < 0.4.7 send no index (the openai SDK raised
    TypeError): whole calls each open a call, bare fragments continue the open one."""
    whole = [
        ev(call(NO_INDEX, "call_1", "read", '{"path": "a"}')),
        ev(call(NO_INDEX, "call_2", "read", '{"path": "b"}')),
    ]
    assert summary(run([*whole, ev(finish="stop"), "[DONE]"])) == [
        ("call_1", "read", "complete", {"path": "a"}),
        ("call_2", "read", "complete", {"path": "b"}),
    ]

    fragmented = [
        ev(call(NO_INDEX, "call_1", "read", "")),
        ev(call(NO_INDEX, args='{"path":')),
        ev(call(NO_INDEX, args=' "a"}')),
        ev(call(NO_INDEX, "call_2", "grep", "")),
        ev(call(NO_INDEX, args='{"q": "b"}')),
    ]
    assert summary(run([*fragmented, *DONE])) == [
        ("call_1", "read", "complete", {"path": "a"}),
        ("call_2", "grep", "complete", {"q": "b"}),
    ]


def test_quirk_index_starts_at_1() -> None:
    """Bedrock Mantle via LiteLLM numbers calls from 1; openai-python split such a call in two
    and the Go SDK dropped it. Calls are renumbered from 0."""
    events = [
        ev(call(1, "call_m1", "get_weather", "")),
        ev(call(1, args='{"city":')),
        ev(call(1, args=' "Oslo"}')),
        ev(call(2, "call_m2", "get_time", '{"tz": "CET"}')),
        *DONE,
    ]
    calls = run(events)
    assert summary(calls) == [
        ("call_m1", "get_weather", "complete", {"city": "Oslo"}),
        ("call_m2", "get_time", "complete", {"tz": "CET"}),
    ]
    assert [c.index for c in calls] == [0, 1]


def test_quirk_index_as_string() -> None:
    """An index "0" and an index 0 are the same call (LangChain never merged them)."""
    events = [
        ev(call("0", "call_a", "f", '{"a"')),
        ev(call(0, args=": 1")),
        ev(call("0", args="}")),
        ev(call("1", "call_b", "g", "{}")),
        *DONE,
    ]
    assert summary(run(events)) == [
        ("call_a", "f", "complete", {"a": 1}),
        ("call_b", "g", "complete", {}),
    ]


def test_quirk_id_repeated_in_every_chunk() -> None:
    """DeepSeek and Qwen resend the id with every fragment: keep it once, one call."""
    events = [
        ev(call(0, "call_a", "get_weather", "")),
        ev(call(0, "call_a", args='{"city":')),
        ev(call(0, "call_a", args=' "Paris"}')),
        ev(call(0, "call_a", args="")),
        *DONE,
    ]
    calls = run(events)
    assert summary(calls) == [("call_a", "get_weather", "complete", {"city": "Paris"})]


def test_quirk_fresh_id_on_each_chunk_or_integer_ids() -> None:
    """LM Studio / Kimi send a new id with each fragment of one call: it stays one call with
    the first id. Poolside sends integer ids: they become strings."""
    fresh = [
        ev(call(0, "call_x1", "f", '{"a"')),
        ev(call(0, "call_x2", args=": 1")),
        ev(call(0, "call_x3", args="}")),
        *DONE,
    ]
    assert summary(run(fresh)) == [("call_x1", "f", "complete", {"a": 1})]

    integers = [
        ev(call(0, 7, "f", '{"a": 1}')),
        ev(call(1, 8, "g", "{}")),
        *DONE,
    ]
    calls = run(integers)
    assert summary(calls) == [("7", "f", "complete", {"a": 1}), ("8", "g", "complete", {})]
    assert all(isinstance(c.id, str) for c in calls)


def test_quirk_id_missing_or_same_id_on_two_calls() -> None:
    """OpenRouter upstreams: call 0 without an id, calls 1 and 2 both "call_0" (also at one
    index). Ids are made unique, and the call knows its id was changed."""
    events = [
        ev(call(0, None, "read_file", '{"path": "a"}')),
        ev(call(1, "call_0", "read_file", '{"path": "b"}')),
        ev(call(2, "call_0", "grep", '{"q": "c"}')),
        *DONE,
    ]
    calls = run(events)
    assert summary(calls) == [
        ("call_toolref_1", "read_file", "complete", {"path": "a"}),
        ("call_0", "read_file", "complete", {"path": "b"}),
        ("call_0_2", "grep", "complete", {"q": "c"}),
    ]
    assert calls[0].meta.get("synthesized_id") is True
    assert "original_id" not in calls[1].meta
    assert calls[2].meta.get("original_id") == "call_0"

    same_index = [
        ev(call(0, "call_0", "read_file", '{"path": "a"}')),
        ev(call(0, "call_0", "read_file", '{"path": "b"}')),
        *DONE,
    ]
    assert summary(run(same_index)) == [
        ("call_0", "read_file", "complete", {"path": "a"}),
        ("call_0_2", "read_file", "complete", {"path": "b"}),
    ]


def test_quirk_placeholder_id_null() -> None:
    """Mistral's SDK default id is the string "null" (and its index defaults to 0): treat
    "null" and "" as no id, so two calls do not become "null" and "null_2"."""
    events = [
        ev(
            call(0, "null", "get_weather", '{"city": "Paris"}'),
            call(0, "null", "get_time", '{"tz": "CET"}'),
        ),
        ev(call(1, "", "get_news", "{}")),
        ev(finish="stop"),
        "[DONE]",
    ]
    calls = run(events)
    assert summary(calls) == [
        ("call_toolref_1", "get_weather", "complete", {"city": "Paris"}),
        ("call_toolref_2", "get_time", "complete", {"tz": "CET"}),
        ("call_toolref_3", "get_news", "complete", {}),
    ]
    assert all(c.meta.get("synthesized_id") is True for c in calls)


def test_quirk_name_resent_in_every_chunk() -> None:
    """MiniMax via NVIDIA NIM resends the name: `+=` gives "read_fileread_file"."""
    events = [
        ev(call(0, "call_a", "read_file", "")),
        ev(call(0, name="read_file", args='{"path":')),
        ev(call(0, name="read_file", args=' "a.txt"}')),
        ev(call(0, name="read_file", args="")),
        *DONE,
    ]
    assert summary(run(events)) == [("call_a", "read_file", "complete", {"path": "a.txt"})]


def test_quirk_cumulative_arguments() -> None:
    """Qianfan / GLM-style servers resend the whole argument text so far, and sometimes the
    finished text once more: `+=` gives '{…}{…}'."""
    events = [
        ev(call(0, "call_q", "get_weather", '{"city":')),
        ev(call(0, args='{"city": "Bei')),
        ev(call(0, args='{"city": "Beijing"}')),
        ev(call(0, args='{"city": "Beijing"}')),
        *DONE,
    ]
    [weather] = run(events)
    assert weather.status is CallStatus.COMPLETE
    assert weather.arguments == {"city": "Beijing"}
    assert weather.raw_arguments == '{"city": "Beijing"}'


def test_cumulative_resend_that_did_not_grow_changes_nothing() -> None:
    """Once a call is known to be cumulative (§9 rule 5: latch per slot), a resend equal to
    the text so far is a no-op even while the JSON is still open."""
    events = [
        ev(call(0, "call_q", "get_weather", '{"city":')),
        ev(call(0, args='{"city": "Pa')),
        ev(call(0, args='{"city": "Pa')),
        ev(call(0, args='{"city": "Paris"}')),
        *DONE,
    ]
    [weather] = run(events)
    assert weather.raw_arguments == '{"city": "Paris"}'
    assert weather.arguments == {"city": "Paris"}


SCRIPT = '{"script": "ls /tmp | wc -l"}'

LOCALAI_WHOLE_RESENDS = [
    ev(call(0, "call_l", "bash", SCRIPT)),
    ev(call(1, "call_l", "bash", SCRIPT)),
    ev(call(2, "call_l", "bash", SCRIPT)),
    *DONE,
]
# The pattern mudler/LocalAI#9722 reports: the full call at index 1 first, then the same call
# (same id) streamed at index 0 with empty arguments and a continuation.
LOCALAI_9722 = [
    ev(call(1, "call_l", "bash", SCRIPT)),
    ev(call(0, "call_l", "bash", "")),
    ev(call(0, args=SCRIPT)),
    *DONE,
]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(LOCALAI_WHOLE_RESENDS, id="whole-resends"),
        pytest.param(
            LOCALAI_9722,
            id="localai-9722",
        ),
    ],
)
def test_quirk_same_call_at_several_indices(events: list[Any]) -> None:
    """LocalAI emits one logical call at several indices, all with the same id; the
    workaround is to merge by id. The tool must run once."""
    calls = run(events)
    assert summary(calls) == [("call_l", "bash", "complete", {"script": "ls /tmp | wc -l"})]


def test_localai_resend_in_pieces_at_another_index_is_the_same_call() -> None:
    """LocalAI's resend at another index may come in pieces: each repeats the finished call's
    text from where the last left off, so it stays one call (the pieces were appended to it,
    making it invalid)."""
    events = [
        ev(call(1, "call_l", "bash", SCRIPT)),
        ev(call(0, "call_l", "bash", "")),
        ev(call(0, args=SCRIPT[:11])),
        ev(call(0, args=SCRIPT[11:20])),
        ev(call(0, args=SCRIPT[20:])),
        *DONE,
    ]
    assert summary(run(events)) == [("call_l", "bash", "complete", {"script": "ls /tmp | wc -l"})]


# Two distinct calls that reuse one id and one name at two indexes (OpenRouter upstreams),
# each streamed after a name-only opening like LocalAI's resend: only the text tells them apart.
OPENROUTER_SAME_ID_AND_NAME = [
    ev(call(0, "call_0", "read_file", "")),
    ev(call(0, args='{"path": "a.txt"}')),
    ev(call(1, "call_0", "read_file", "")),
    ev(call(1, args='{"path": ')),
    ev(call(1, args='"b.txt"}')),
    *DONE,
]
OPENROUTER_SAME_ID_AND_NAME_SHARED_PREFIX = [
    ev(call(0, "call_0", "read_file", "")),
    ev(call(0, args='{"path": "a.txt"}')),
    ev(call(1, "call_0", "read_file", "")),
    ev(call(1, args='{"path": "')),  # repeats call 0's text so far: undecided
    ev(call(1, args='b.txt"}')),  # departs from it: another call
    *DONE,
]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(OPENROUTER_SAME_ID_AND_NAME, id="fresh-object"),
        pytest.param(OPENROUTER_SAME_ID_AND_NAME_SHARED_PREFIX, id="shared-prefix"),
    ],
)
def test_two_calls_sharing_an_id_and_a_name_at_two_indexes_stay_two(events: list[Any]) -> None:
    """Merged by id, the second call's text was appended to the first's finished object
    (`{"path": "a.txt"}{"path": "b.txt"}`, one invalid call). Text at the second index that
    departs from the first call's finished arguments is another call; LocalAI's resends
    (test_quirk_same_call_at_several_indices) repeat them and stay one call."""
    calls = run(events)
    assert summary(calls) == [
        ("call_0", "read_file", "complete", {"path": "a.txt"}),
        ("call_0_2", "read_file", "complete", {"path": "b.txt"}),
    ]
    assert calls[1].meta.get("original_id") == "call_0"
    assert [c.index for c in calls] == [0, 1]


@pytest.mark.parametrize(
    "late",
    [
        pytest.param(call(0, name="read_file", args="\n"), id="name-resent-with-a-newline"),
        pytest.param(call(0, "call_a", "read_file", " "), id="id-and-name-resent-with-a-space"),
        pytest.param(call(0, "call_b", args=" "), id="fresh-id-with-a-space"),
        pytest.param(call(1, args="\n"), id="new-index-with-a-newline"),
        pytest.param(call(1, "call_a", "read_file", "  "), id="same-id-at-a-new-index"),
        pytest.param(call(NO_INDEX, name="read_file", args="\t"), id="no-index-name-and-tab"),
    ],
)
def test_whitespace_after_a_finished_call_opens_no_phantom_call(late: dict[str, Any]) -> None:
    """MiniMax-style streams resend a call's fragment (its name each time) or send
    whitespace-only argument deltas after the object closed. Whitespace carries nothing in
    JSON: it opened a second call whose blank arguments read as `{}`, one that would run."""
    events = [
        ev(call(0, "call_a", "read_file", "")),
        ev(call(0, name="read_file", args='{"path":')),
        ev(call(0, name="read_file", args=' "a.txt"}')),
        ev(late),
        *DONE,
    ]
    calls = run(events)
    assert summary(calls) == [("call_a", "read_file", "complete", {"path": "a.txt"})]
    assert buffered(events).has_tool_calls


def test_whitespace_inside_a_string_still_reaches_the_call() -> None:
    """Only a call's opening is refused to whitespace: a blank delta inside a string value
    (a command's spaces) is content."""
    events = [
        ev(call(0, "call_a", "bash", '{"cmd": "ls')),
        ev(call(0, name="bash", args="   ")),
        ev(call(0, name="bash", args='-la"}')),
        *DONE,
    ]
    assert summary(run(events)) == [("call_a", "bash", "complete", {"cmd": "ls   -la"})]


def test_quirk_arguments_as_json_object() -> None:
    """LiteLLM ollama_chat, some OpenRouter paths and Mistral send arguments as an object,
    whole or after a name-only opening fragment."""
    events = [
        ev(call(0, "call_o1", "get_current_weather", {"location": "Toronto", "unit": "c"})),
        ev(call(1, "call_o2", "grep", "")),
        ev(call(1, args={"pattern": "sol"})),
        ev(call(2, "null", "list_files", {})),
        ev(finish="stop"),
        "[DONE]",
    ]
    calls = run(events)
    assert summary(calls) == [
        ("call_o1", "get_current_weather", "complete", {"location": "Toronto", "unit": "c"}),
        ("call_o2", "grep", "complete", {"pattern": "sol"}),
        ("call_toolref_3", "list_files", "complete", {}),
    ]
    assert [c.raw_arguments for c in calls] == [
        '{"location":"Toronto","unit":"c"}',
        '{"pattern":"sol"}',
        "{}",
    ]


SIGNATURE = {"google": {"thought_signature": "CiQBsig"}}
SIGNED_WHOLE = [
    ev(call(NO_INDEX, "call_1", "read", '{"p": 1}', extra_content=SIGNATURE)),
    ev(call(NO_INDEX, "call_2", "read", '{"p": 2}')),
    ev(finish="stop"),
    "[DONE]",
]
META_ONLY_WITH_ID = [
    ev(call(NO_INDEX, "call_1", "read", '{"p": 1}')),
    ev({"id": "call_1", "type": "function", "extra_content": SIGNATURE}),
    ev(call(NO_INDEX, "call_2", "read", '{"p": 2}')),
    ev(finish="stop"),
    "[DONE]",
]
META_ONLY_BEFORE_CALL = [
    ev({"index": 0, "type": "function", "extra_content": SIGNATURE}),
    ev(call(0, "call_1", "read", '{"p": 1}')),
    ev(call(1, "call_2", "read", '{"p": 2}')),
    *DONE,
]
META_ONLY_BARE = [
    ev(call(NO_INDEX, "call_1", "read", '{"p": 1}')),
    ev({"extra_content": SIGNATURE}),
    ev(call(NO_INDEX, "call_2", "read", '{"p": 2}')),
    ev(finish="stop"),
    "[DONE]",
]
META_ONLY_WITH_INDEX = [
    ev(call(0, "call_1", "read", '{"p": 1}')),
    ev({"index": 0, "extra_content": SIGNATURE}),
    ev(call(1, "call_2", "read", '{"p": 2}')),
    *DONE,
]


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(SIGNED_WHOLE, id="on-the-call-delta"),
        pytest.param(META_ONLY_WITH_ID, id="metadata-only-with-id"),
        pytest.param(META_ONLY_BEFORE_CALL, id="metadata-only-before-the-call"),
        pytest.param(META_ONLY_BARE, id="metadata-only-bare"),
        pytest.param(META_ONLY_WITH_INDEX, id="metadata-only-with-index"),
    ],
)
def test_quirk_provider_extras_on_tool_call_deltas(events: list[Any]) -> None:
    """Gemini compat's `extra_content.google.thought_signature` must reach the call it belongs
    to (and only that one), whether it rides on the call's delta or comes alone; LiteLLM's
    builder dropped it and Gemini 3 then answers 400."""
    first, second = run(events)
    assert summary([first, second]) == [
        ("call_1", "read", "complete", {"p": 1}),
        ("call_2", "read", "complete", {"p": 2}),
    ]
    assert first.meta.get("extra_content") == SIGNATURE
    assert "extra_content" not in second.meta


def test_quirk_provider_extras_are_deep_merged() -> None:
    """OpenRouter `reasoning_details` and LiteLLM `provider_specific_fields` are kept, and
    extras arriving on several fragments of one call are merged, not replaced."""
    events = [
        ev(
            call(
                0,
                "call_1",
                "read",
                "",
                provider_specific_fields={"thought_signature": "lsig"},
                extra_content={"google": {"thought_signature": "gsig"}},
            )
        ),
        ev(call(0, args='{"p": 1}', extra_content={"google": {"cache": "hit"}})),
        ev(call(0, args=" ", reasoning_details=[{"type": "reasoning.encrypted", "data": "x"}])),
        *DONE,
    ]
    [read] = run(events)
    assert read.arguments == {"p": 1}
    assert read.meta.get("provider_specific_fields") == {"thought_signature": "lsig"}
    assert read.meta.get("extra_content") == {
        "google": {"thought_signature": "gsig", "cache": "hit"}
    }
    assert read.meta.get("reasoning_details") == [{"type": "reasoning.encrypted", "data": "x"}]


def test_quirk_server_side_parsers_dropping_args() -> None:
    """vLLM / SGLang tool parsers: finish_reason "tool_calls" with no tool-call delta at all
    gives no call (none is invented), and arguments cut short are invalid, never run."""
    nothing = [ev(finish="tool_calls"), "[DONE]"]
    assert run(nothing) == []
    buffer = buffered(nothing)
    assert buffer.has_tool_calls is False
    assert buffer.finish_reasons == {0: "tool_calls"}

    truncated = [
        ev(call(0, "call_v", "write_file", '{"path": "a.txt", "content": "hel')),
        *DONE,
    ]
    [write] = run(truncated)
    assert write.status is CallStatus.INVALID
    assert write.arguments is None
    assert write.raw_arguments == '{"path": "a.txt", "content": "hel'
    assert write.error is not None
    assert "JSON" in write.error
    assert not write.runnable
    assert buffered(truncated).has_tool_calls is False


def test_quirk_different_response_id_per_chunk() -> None:
    """LiteLLM and foundry-local change the chunk `id` on every chunk: it does not split or
    group calls."""
    events = [
        ev(call(0, "call_a", "f", '{"a":'), chunk_id="chatcmpl-1"),
        ev(call(0, args=" 1}"), chunk_id="chatcmpl-2"),
        ev(call(1, "call_b", "g", "{}"), chunk_id="chatcmpl-3"),
        ev(finish="tool_calls", chunk_id="chatcmpl-4"),
        "[DONE]",
    ]
    calls = run(events)
    assert summary(calls) == [
        ("call_a", "f", "complete", {"a": 1}),
        ("call_b", "g", "complete", {}),
    ]


# --- §1.4: finish_reason semantics ---


def test_finish_reason_stop_with_calls_gives_runnable_calls() -> None:
    """OpenAI answers "stop" when tool_choice names a function (Gemini compat and ollama_chat
    too): the calls are runnable all the same."""
    events = [
        ev(call(0, "call_a", "get_weather", '{"city": "Paris"}')),
        ev(finish="stop"),
        "[DONE]",
    ]
    [weather] = run(events)
    assert weather.status is CallStatus.COMPLETE
    assert weather.runnable
    buffer = buffered(events)
    assert buffer.has_tool_calls is True
    assert buffer.finish_reasons == {0: "stop"}


@pytest.mark.parametrize(
    ("reason", "error_type"), [("length", TRUNCATED), ("content_filter", FILTERED)]
)
def test_truncating_finish_reason_makes_open_calls_incomplete(reason: str, error_type: str) -> None:
    """Every call is still open at the finish in Chat Completions, so all of them are
    incomplete, even one whose JSON happens to parse; none can be registered."""
    events = [
        ev(call(0, "call_a", "write_file", '{"path": "a.txt"}')),
        ev(call(1, "call_b", "write_file", '{"path": "b.txt", "content": "hel')),
        ev(finish=reason),
        "[DONE]",
    ]
    calls = run(events)
    assert [(c.status, c.error_type, c.arguments) for c in calls] == [
        (CallStatus.INCOMPLETE, error_type, None),
        (CallStatus.INCOMPLETE, error_type, None),
    ]
    assert [c.raw_arguments for c in calls] == [
        '{"path": "a.txt"}',
        '{"path": "b.txt", "content": "hel',
    ]
    assert not any(c.runnable for c in calls)
    assert buffered(events).has_tool_calls is False
    with pytest.raises(UnusableToolCallError):
        calls[0].invocation("result")


def test_deltas_before_finish_in_one_chunk() -> None:
    """A chunk with the last fragments and finish_reason applies the fragments first (every
    entry, not only tool_calls[0]); with "length" the arguments still land, as incomplete."""
    events = [
        ev(call(0, "call_a", "search", '{"q": "a')),
        ev(call(1, "call_b", "search", '{"q": "b')),
        ev(call(0, args='lpha"}'), call(1, args='eta"}'), finish="tool_calls"),
    ]
    assert summary(run(events)) == [
        ("call_a", "search", "complete", {"q": "alpha"}),
        ("call_b", "search", "complete", {"q": "beta"}),
    ]

    single = [ev(call(0, "call_a", "search", '{"q": "alpha"}'), finish="tool_calls")]
    assert summary(run(single)) == [("call_a", "search", "complete", {"q": "alpha"})]

    cut = [ev(call(0, "call_a", "search", '{"q": "alp'), finish="length")]
    [search] = run(cut)
    assert (search.status, search.error_type) == (CallStatus.INCOMPLETE, TRUNCATED)
    assert search.raw_arguments == '{"q": "alp'


def test_empty_choices_usage_and_prompt_filter_chunks_are_tolerated() -> None:
    """Azure's leading `prompt_filter_results` chunk and the final usage chunk have
    `choices: []`; text deltas and a choice without a delta carry no call."""
    azure_filter = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [
            {"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}
        ],
    }
    usage = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    text = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}],
    }
    no_delta = {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": None}]}
    events = [
        azure_filter,
        text,
        no_delta,
        ev(call(0, "call_a", "f", '{"a": 1}')),
        ev(finish="tool_calls"),
        usage,
        "[DONE]",
    ]
    assert summary(run(events)) == [("call_a", "f", "complete", {"a": 1})]


def test_choices_are_separate_turns_keyed_by_choice_index() -> None:
    """With n > 1 the same tool-call index in two choices is two calls in two turns, and
    choices are keyed by their `index`, not their position (openai-python PR #3709)."""
    events = [
        {
            "id": "chatcmpl-1",
            "choices": [
                {"index": 1, "delta": {"tool_calls": [call(0, "call_b", "g", '{"b":')]}},
                {"index": 0, "delta": {"tool_calls": [call(0, "call_a", "f", '{"a":')]}},
            ],
        },
        {
            "id": "chatcmpl-1",
            "choices": [
                {"index": 1, "delta": {"tool_calls": [call(0, args=" 2}")]}},
                {"index": 0, "delta": {"tool_calls": [call(0, args=" 1}")]}},
            ],
        },
        ev(finish="tool_calls", choice=1),
        ev(finish="stop", choice=0),
        "[DONE]",
    ]
    calls = run(events)
    assert [(c.turn, c.index, c.id, c.name, c.arguments) for c in calls] == [
        (0, 0, "call_a", "f", {"a": 1}),
        (1, 0, "call_b", "g", {"b": 2}),
    ]
    assert buffered(events).finish_reasons == {0: "stop", 1: "tool_calls"}


def test_stream_ending_without_finish_or_done_keeps_whole_objects_and_cuts_the_rest() -> None:
    """No finish_reason and no [DONE] (the openai SDK swallows [DONE], some routers send no
    finish_reason): the end of the events is the end of the stream. Arguments that are a
    whole JSON object are complete, since no continuation could make them another valid
    object; arguments cut mid-object are incomplete (aborted), never run."""
    events = [
        ev(call(0, "call_a", "f", '{"a": 1}')),
        ev(call(1, "call_b", "g", '{"b": ')),
    ]
    calls = run(events)
    assert [(c.id, c.status, c.error_type, c.arguments) for c in calls] == [
        ("call_a", CallStatus.COMPLETE, None, {"a": 1}),
        ("call_b", CallStatus.INCOMPLETE, ABORTED, None),
    ]
    assert calls[1].raw_arguments == '{"b": '
    assert "'{\"b\": '" in (calls[1].error or "")
    buffer = buffered(events)
    assert buffer.has_tool_calls is True
    assert buffer.finish_reasons == {}


def test_done_without_finish_reason_is_a_clean_end() -> None:
    """Some servers end with [DONE] and never send a finish_reason: the calls are complete."""
    events = [ev(call(0, "call_a", "f", '{"a": 1}')), "data: [DONE]"]
    [only] = run(events)
    assert (only.status, only.arguments) == (CallStatus.COMPLETE, {"a": 1})


def test_mid_stream_error_event_makes_open_calls_incomplete() -> None:
    """A `{"error": …}` event mid-stream ends the response: open calls are incomplete, with
    the server's message, and a later [DONE] does not revive them."""
    events = [
        ev(call(0, "call_a", "f", '{"a": 1}')),
        ev(call(1, "call_b", "g", '{"b": ')),
        {"error": {"message": "Internal server error", "type": "server_error", "code": 500}},
        "[DONE]",
    ]
    calls = run(events)
    assert [(c.status, c.error_type) for c in calls] == [
        (CallStatus.INCOMPLETE, ABORTED),
        (CallStatus.INCOMPLETE, ABORTED),
    ]
    assert all(c.error is not None and "Internal server error" in c.error for c in calls)
    assert 0 in buffered(events).errors


# --- §7.1: what naive accumulators produce, and the buffer does not ---


def test_repeated_id_is_not_concatenated() -> None:
    """openai-python's `accumulate_delta` concatenates strings: "call_a" twice gives
    "call_acall_a"."""
    events = [
        ev(call(0, "call_a", "f", "")),
        ev(call(0, "call_a", args='{"x": 1}')),
        *DONE,
    ]
    [only] = run(events)
    assert only.id == "call_a"
    assert only.id != "call_acall_a"


def test_repeated_name_is_not_concatenated() -> None:
    """The same merge gives the name "ff" when "f" is resent."""
    events = [
        ev(call(0, "call_a", "f", "")),
        ev(call(0, "call_a", "f", '{"x": 1}')),
        *DONE,
    ]
    [only] = run(events)
    assert only.name == "f"
    assert only.arguments == {"x": 1}


def test_parallel_calls_at_one_index_are_not_merged() -> None:
    """Merging by position turns two calls at index 0 into one call with id "call_acall_b",
    name "ff" and arguments '{"x":1}{"y":2}' (which a partial-mode parser reads as
    {"x": 1}); the buffer keeps two calls with one object each."""
    events = [
        ev(call(0, "call_a", "f", '{"x":1}')),
        ev(call(0, "call_b", "f", '{"y":2}')),
        *DONE,
    ]
    calls = run(events)
    assert [(c.id, c.name, c.raw_arguments, c.arguments) for c in calls] == [
        ("call_a", "f", '{"x":1}', {"x": 1}),
        ("call_b", "f", '{"y":2}', {"y": 2}),
    ]
    assert all("}{" not in c.raw_arguments for c in calls)


def test_two_objects_in_one_call_are_invalid_not_truncated_to_the_first() -> None:
    """If a server does put '{..}{..}' into one call, the strict final parse rejects it
    instead of running the call with the first object (§0.5, jiter partial mode)."""
    events = [
        ev(call(0, "call_a", "f", '{"a": 1}')),
        ev(call(0, args='{"b": 2')),
        ev(call(0, args="}")),
        *DONE,
    ]
    [only] = run(events)
    assert only.status is CallStatus.INVALID
    assert only.arguments is None
    assert only.raw_arguments == '{"a": 1}{"b": 2}'


def test_long_arguments_in_small_deltas_are_not_parsed_again_per_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """5,000 deltas of an array of objects, each ending in `}`: the arguments so far are
    parsed (and joined) a bounded number of times, not once per delta (which made a 549 KB
    array take 157 s)."""
    import json as json_module

    parsed: list[int] = []
    loads = json_module.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr("toolref.streaming.adapters.openai_chat.json.loads", counting)
    items = [f'{{"n":{n}}}' for n in range(5000)]
    deltas = ['{"items":[', items[0], *("," + item for item in items[1:]), "]}"]
    events = [ev(call(0, "call_a", "save", "")), *(ev(call(0, args=d)) for d in deltas), *DONE]
    calls = run(events)
    whole = {"items": [{"n": n} for n in range(5000)]}
    assert summary(calls) == [("call_a", "save", "complete", whole)]
    assert len(parsed) < 50, len(parsed)


@pytest.mark.parametrize("quirk", ["name on every fragment", "fresh id on every fragment"])
def test_long_arguments_from_resending_servers_are_not_parsed_again_per_delta(
    monkeypatch: pytest.MonkeyPatch, quirk: str
) -> None:
    """MiniMax (via NIM) resends the name with every fragment, LM Studio a fresh id: each
    fragment then asks whether the arguments so far are a whole object, which joined and
    parsed them once per delta (10,000 items took 11 s). A scan of each delta's own text
    answers it, and only a closed object is parsed."""
    import json as json_module

    parsed: list[int] = []
    loads = json_module.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr("toolref.streaming.adapters.openai_chat.json.loads", counting)
    items = [f'{{"n":{n},"s":"{{[\\"}}]"}}' for n in range(5000)]
    deltas = ['{"items":[', items[0], *("," + item for item in items[1:]), "]}"]
    if quirk == "name on every fragment":
        fragments = [call(0, args=d, name="save") for d in deltas]
    else:
        fragments = [call(0, f"lms_{n}", args=d) for n, d in enumerate(deltas)]
    events = [ev(call(0, "call_a", "save", "")), *(ev(f) for f in fragments), *DONE]
    calls = run(events)
    whole = {"items": [{"n": n, "s": '{["}]'} for n in range(5000)]}
    assert summary(calls) == [("call_a", "save", "complete", whole)]
    assert len(parsed) < 50, len(parsed)
