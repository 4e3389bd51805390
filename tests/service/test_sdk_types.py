"""Hydrated messages are the SDKs' own request types, not just equal to what was sent.

Each round trip (optimize, then hydrate the optimized messages) checks every hydrated message
against the `openai` and `anthropic` packages' TypedDicts through a pydantic `TypeAdapter`:
`ChatCompletionMessageParam`, `ResponseInputItemParam` and `MessageParam`. The control tests
show that this validation is strict enough to matter: a `toolRef` marker left where a payload
belongs fails it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter, ValidationError

from ..conftest import need

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
MARKERS = ("toolRef", "toolRefOrder")
REF = "tr_x7k2m4qpeoaccwyd6n3h5ggwmu"
ARGS = '{"path": "src/app.py"}'
FILE = "import os\n" * 200

ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "openai-chat": TypeAdapter(ChatCompletionMessageParam),
    "openai-responses": TypeAdapter(ResponseInputItemParam),
    "anthropic": TypeAdapter(MessageParam),
}


def drain(value: Any) -> Any:
    """Consume every iterator in a validated value, so its items are validated too."""
    if isinstance(value, dict):
        return {k: drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [drain(v) for v in value]
    return value


def validate(fmt: str, message: Any) -> None:
    """Raise `ValidationError` unless `message` is the SDK's type for `fmt`.

    The SDKs type lists as `Iterable[...]`, which pydantic validates lazily: `validate_python`
    returns an iterator that checks each item only when it is consumed (`tool_calls`,
    block-list `content`, ...). Draining it is what makes those items count.
    """
    drain(ADAPTERS[fmt].validate_python(message))


def is_valid(fmt: str, message: Any) -> bool:
    try:
        validate(fmt, message)
    except ValidationError:
        return False
    return True


def has_marker(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k in MARKERS or has_marker(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_marker(v) for v in value)
    return False


def anthropic_call_marked(message: Any) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" and "toolRef" in b for b in content
    )


async def round_trip(
    api: httpx.AsyncClient, fmt: str, messages: list[Any], exempt: frozenset[int] = frozenset()
) -> tuple[list[Any], int]:
    """Optimize then hydrate; check the hydrated messages are the originals and SDK types.

    Returns the optimized messages and the number of refs they use. `exempt` lists the
    indices of messages that are genuinely not SDK types (in the original too); they still
    make the round trip and must come back equal.
    """
    kept = copy.deepcopy(messages)
    checked = [i for i in range(len(kept)) if i not in exempt]
    for i in checked:
        validate(fmt, kept[i])  # the fixture itself is valid, so the checks below mean something

    response = await api.post("/v1/messages:optimize", json={"messages": messages})
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["format"] == fmt
    optimized = body["messages"]
    marked = {i for i in checked if has_marker(optimized[i])}
    assert marked, "nothing was replaced by a ref"
    refs_used: int = body["optimizationStats"]["refsUsed"]
    # The validator sees the markers: every marked message fails it, except an anthropic user
    # message whose tool_result blocks lost only `content`, which the SDK makes optional.
    failing = {i for i in checked if not is_valid(fmt, optimized[i])}
    if fmt == "anthropic":
        assert failing == {i for i in marked if anthropic_call_marked(optimized[i])}
        assert failing
    else:
        assert failing == marked

    response = await api.post("/v1/messages:hydrate", json={"messages": optimized})
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["format"] == fmt
    hydrated: list[Any] = body["messages"]
    for i in checked:
        try:
            validate(fmt, hydrated[i])
        except ValidationError as exc:
            pytest.fail(f"hydrated message {i} is not a {fmt} SDK type: {exc}")
    # Equality also covers what the SDK types cannot see (extra members, an anthropic
    # tool_result without `content`): nothing added, nothing lost, same order.
    assert hydrated == kept
    assert not has_marker(hydrated)
    return optimized, refs_used


# --- the validation is strict enough to matter ------------------------------------------------


def chat_call() -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": ARGS}}
        ],
    }


def anthropic_call() -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "app.py"}},
        ],
    }


# (format, a valid message, path to the object holding the payload, payload member)
CONTROLS: dict[str, tuple[str, dict[str, Any], tuple[Any, ...], str]] = {
    "chat function arguments": (
        "openai-chat",
        chat_call(),
        ("tool_calls", 0, "function"),
        "arguments",
    ),
    "chat tool content": (
        "openai-chat",
        {"role": "tool", "tool_call_id": "call_1", "content": FILE},
        (),
        "content",
    ),
    "chat tool block content": (
        "openai-chat",
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": FILE}]},
        ("content", 0),
        "text",
    ),
    "anthropic tool_use input": ("anthropic", anthropic_call(), ("content", 1), "input"),
    "anthropic tool_result text block": (
        "anthropic",
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": FILE}],
                }
            ],
        },
        ("content", 0, "content", 0),
        "text",
    ),
    "responses function_call arguments": (
        "openai-responses",
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": ARGS},
        (),
        "arguments",
    ),
    "responses function_call_output output": (
        "openai-responses",
        {"type": "function_call_output", "call_id": "call_1", "output": FILE},
        (),
        "output",
    ),
    "responses custom_tool_call input": (
        "openai-responses",
        {"type": "custom_tool_call", "call_id": "call_1", "name": "patch", "input": "*** x"},
        (),
        "input",
    ),
    "responses custom_tool_call_output output": (
        "openai-responses",
        {"type": "custom_tool_call_output", "call_id": "call_1", "output": FILE},
        (),
        "output",
    ),
}


@pytest.mark.parametrize("case", CONTROLS)
def test_a_marker_in_place_of_a_payload_fails_validation(case: str) -> None:
    fmt, message, path, key = CONTROLS[case]
    validate(fmt, message)
    broken = copy.deepcopy(message)
    node: Any = broken
    for step in path:
        node = node[step]
    del node[key]
    node["toolRef"] = REF
    with pytest.raises(ValidationError):
        validate(fmt, broken)


def test_validation_needs_the_lazy_iterables_drained() -> None:
    broken = chat_call()
    broken["tool_calls"][0]["function"] = {"name": "bash", "toolRef": REF}
    # validate_python alone accepts it: `tool_calls` is an Iterable, checked only when consumed.
    ADAPTERS["openai-chat"].validate_python(broken)
    with pytest.raises(ValidationError, match="arguments"):
        validate("openai-chat", broken)


def test_required_members_and_types_are_enforced() -> None:
    assert not is_valid("openai-chat", {"role": "tool", "content": "x"})  # no tool_call_id
    assert not is_valid("openai-chat", {"role": "exit", "content": "x"})
    tool_use = anthropic_call()
    tool_use["content"][1]["input"] = ARGS  # a JSON string where an object belongs
    assert not is_valid("anthropic", tool_use)
    assert not is_valid(
        "openai-responses",
        {"type": "function_call", "call_id": "c", "name": "bash", "arguments": {"path": "a"}},
    )


def test_extra_members_are_ignored_but_an_anthropic_tool_result_marker_is_invisible() -> None:
    # Real traces carry non-standard members (mini-swe-agent's `extra`): they do not fail.
    assert is_valid("openai-chat", {"role": "user", "content": "hi", "extra": {"step": 1}})
    # `content` is optional on a tool_result, so a marker left there passes the SDK type:
    # round_trip compares with the original as well for that reason.
    marked = {"type": "tool_result", "tool_use_id": "toolu_1", "toolRef": REF}
    assert is_valid("anthropic", {"role": "user", "content": [marked]})


# --- real traces ------------------------------------------------------------------------------


def trace_conversations(fmt: str) -> list[tuple[str, list[Any]]]:
    if not TRACES.is_dir():
        need(f"the shared traces are not at {TRACES}")
    found = []
    for path in sorted(TRACES.glob("*.json")):
        kind = "anthropic" if path.name.endswith(".anthropic.json") else "openai-chat"
        if kind != fmt:
            continue
        data = json.loads(path.read_text())
        for n, conversation in enumerate(data.get("conversations", [data])):
            found.append((f"{path.stem}[{n}]", conversation["messages"]))
    return found


def mini_swe_agent_exit(messages: list[Any]) -> frozenset[int]:
    """mini-swe-agent ends a run with `{"role": "exit", "content": <the submitted patch>}`.

    That is the agent's own record of how the run ended, never sent to a model, and no SDK
    role: the only message exempted, and only as the last one.
    """
    exits = frozenset(i for i, m in enumerate(messages) if m.get("role") == "exit")
    assert exits <= {len(messages) - 1}
    return exits


@pytest.mark.parametrize(("fmt", "least"), [("openai-chat", 6), ("anthropic", 1)])
async def test_shared_traces_hydrate_to_sdk_types(
    api: httpx.AsyncClient, fmt: str, least: int
) -> None:
    conversations = trace_conversations(fmt)
    assert len(conversations) >= least
    exempted = 0
    for name, messages in conversations:
        exempt = mini_swe_agent_exit(messages)
        exempted += len(exempt)
        optimized, refs_used = await round_trip(api, fmt, messages, exempt)
        assert refs_used >= 20, name  # every trace has 20+ tool calls
        assert len(optimized) == len(messages), name
    if fmt == "openai-chat":
        assert exempted == 2  # one per mini-swe-agent trace


# --- hand-built conversations -----------------------------------------------------------------


def openai_chat() -> list[dict[str, Any]]:
    return [
        {"role": "developer", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Why does the build fail?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Running the build."}],
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "make"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": ARGS},
                },
                {
                    "id": "call_3",
                    "type": "custom",
                    "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
                },
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": [
                {"type": "text", "text": "make: *** [build] Error 2\n"},
                {"type": "text", "text": "exit status 2"},
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": FILE},
        {"role": "tool", "tool_call_id": "call_3", "content": "Done!"},
        {"role": "assistant", "content": "Line 3 imports a missing module.", "refusal": None},
    ]


def anthropic() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Run the tests and fix what fails."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Run pytest first.", "signature": "EqQBCkYIBxgC"},
                {"type": "text", "text": "Running them."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "pytest"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"path": "app.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "FAILED test_app.py::test_main"},
                        {"type": "text", "text": "exit code 1"},
                    ],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [
                        {"type": "text", "text": FILE},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        },
                    ],
                },
                {"type": "text", "text": "Keep the fix small."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_3", "name": "Bash", "input": {"cmd": "false"}},
                {"type": "tool_use", "id": "toolu_4", "name": "Bash", "input": {"cmd": "true"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "is_error": True,
                    "content": "Exit code 1",
                },
                {"type": "tool_result", "tool_use_id": "toolu_4"},  # no content: no payload
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
    ]


def openai_responses() -> list[dict[str, Any]]:
    return [
        {"role": "developer", "content": "You are a coding agent."},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Read app.py, then fix it."}],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Read the file first."}],
            "encrypted_content": "gAAAAABo",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "read_file",
            "arguments": ARGS,
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": FILE},
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "call_2",
            "name": "bash",
            "arguments": '{"cmd": "pytest"}',
        },
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": [
                {"type": "input_text", "text": "FAILED test_app.py::test_main"},
                {"type": "input_text", "text": "exit code 1"},
            ],
        },
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "call_id": "call_3",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: app.py\n-import os\n*** End Patch\n",
        },
        {"type": "custom_tool_call_output", "call_id": "call_3", "output": "Done!"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Fixed app.py.", "annotations": []}],
        },
    ]


HAND_BUILT = {
    "openai-chat": openai_chat,
    "anthropic": anthropic,
    "openai-responses": openai_responses,
}


@pytest.mark.parametrize(
    ("fmt", "calls"), [("openai-chat", 3), ("anthropic", 3), ("openai-responses", 3)]
)
async def test_hand_built_conversation_hydrates_to_sdk_types(
    api: httpx.AsyncClient, fmt: str, calls: int
) -> None:
    optimized, refs_used = await round_trip(api, fmt, HAND_BUILT[fmt]())
    # Every call with a result, error results, block lists and a Chat Completions `custom`
    # tool call included. Not replaced, so not counted: an anthropic tool_result without
    # `content`.
    assert refs_used == calls
    assert "import os" not in json.dumps(optimized)
