"""Events from the SDKs' stream helpers (`client.chat.completions.stream()`,
`client.messages.stream()`, `client.responses.stream()`): the wrapped chunks are read, the
derived events skipped, and the state-so-far they carry is never dumped (per delta that
would be quadratic). Recorded streams through the real helpers: test_recorded.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from toolref.streaming import adapter_for
from toolref.streaming.adapters.base import as_event


class Derived(BaseModel):
    """A helper event an adapter has no use for; dumping it is an error here."""

    type: str
    snapshot: str = ""

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError(f"{self.type} was dumped")


@pytest.mark.parametrize(
    ("provider", "kind"),
    [
        ("openai_chat", "content.delta"),
        ("openai_chat", "tool_calls.function.arguments.delta"),
        ("openai_chat", "tool_calls.function.arguments.done"),
        ("anthropic", "text"),
        ("anthropic", "input_json"),
        ("anthropic", "citation"),
        ("anthropic", "thinking"),
        ("anthropic", "signature"),
    ],
)
def test_derived_helper_events_are_skipped_without_being_dumped(provider: str, kind: str) -> None:
    assert adapter_for(provider).feed(Derived(type=kind, snapshot="x" * 10_000)) == []


class Wrapped(BaseModel):
    type: str = "chunk"
    chunk: dict[str, Any]
    snapshot: dict[str, Any]


def test_a_chunk_event_is_read_as_its_chunk() -> None:
    fragment = {"index": 0, "id": "call_1", "function": {"name": "f", "arguments": "{}"}}
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}
    [opened] = adapter_for("openai_chat").feed(Wrapped(chunk=chunk, snapshot={"big": "x"}))
    assert (opened.id, opened.name, opened.args_delta) == ("call_1", "f", "{}")


class WithSnapshot(BaseModel):
    type: str
    delta: str
    snapshot: str


def test_the_state_so_far_is_left_out_of_a_dumped_event() -> None:
    event = WithSnapshot(type="response.function_call_arguments.delta", delta="}", snapshot="{}")
    assert as_event(event) == {"type": "response.function_call_arguments.delta", "delta": "}"}
