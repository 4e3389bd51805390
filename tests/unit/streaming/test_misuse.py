"""A stream given to another provider's adapter fails loudly, naming the format the events
are in and the adapter to use; events of no provider in particular (pings, event types a
provider adds later) never do. Before, every such stream gave no calls at all, as a reply
without tool calls does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter

from tests.fixtures.streams.build import HERE
from toolref.streaming import ADAPTERS, OpenAIChatAdapter, accumulate, adapter_for
from toolref.streaming.adapters.detect import LABELS
from toolref.wire.errors import StreamError, ToolrefError

FIXTURES = {path.stem: json.loads(path.read_text()) for path in sorted(HERE.glob("*.json"))}
# One stream of each provider (its first fixture), fed to every other provider's adapter.
FIRST: dict[str, str] = {}
for _name, _fixture in FIXTURES.items():
    FIRST.setdefault(_fixture["provider"], _name)
PAIRS = [(stream, wrong) for stream in FIRST for wrong in sorted(ADAPTERS) if wrong != stream]


def test_every_provider_has_a_stream_to_misroute() -> None:
    assert sorted(FIRST) == sorted(ADAPTERS) == sorted(LABELS)


@pytest.mark.parametrize(("provider", "wrong"), PAIRS, ids=[f"{p}-into-{w}" for p, w in PAIRS])
def test_a_stream_fed_to_another_providers_adapter_raises_naming_the_right_one(
    provider: str, wrong: str
) -> None:
    events = FIXTURES[FIRST[provider]]["events"]
    assert accumulate(events, provider)  # the right adapter reads calls from it
    with pytest.raises(StreamError) as raised:
        accumulate(events, wrong)
    error = raised.value
    assert isinstance(error, ToolrefError)  # the SDK's one exception tree
    assert error.extra == {"detected": provider, "adapter": wrong}
    assert LABELS[provider] in error.detail
    assert f"accumulate(stream, {provider!r})" in error.detail


def test_anthropic_sse_frames_into_the_chat_adapter_say_what_they_are() -> None:
    """The reported case: Anthropic SSE, `event:` lines and all, read as OpenAI Chat."""
    frames = [
        'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", '
        '"type": "message", "role": "assistant", "content": [], "model": "m"}}',
        'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
        '"content_block": {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}}',
    ]
    with pytest.raises(StreamError, match=r"Anthropic Messages events \(an event of type "):
        OpenAIChatAdapter().feed(frames[0])
    with pytest.raises(StreamError, match=r"read it with the 'anthropic' one"):
        accumulate(frames, "openai_chat")


def sdk_events(provider: str, model: TypeAdapter[Any]) -> list[Any]:
    """A fixture's events as the SDK's event models (pings are none: the SDK skips them)."""
    events = FIXTURES[FIRST[provider]]["events"]
    return [model.validate_python(event) for event in events if event.get("type") != "ping"]


def test_sdk_event_objects_of_another_provider_raise_too() -> None:
    """SDK objects of a type an adapter does not read were skipped undumped (they are how the
    `.stream()` helpers add derived events), so a whole SDK stream of another provider gave
    nothing."""
    anthropic_events = sdk_events("anthropic", TypeAdapter(RawMessageStreamEvent))
    assert accumulate(anthropic_events, "anthropic")
    with pytest.raises(StreamError, match="'anthropic'"):
        accumulate(anthropic_events, "openai_chat")
    responses_events = sdk_events("openai_responses", TypeAdapter(ResponseStreamEvent))
    assert accumulate(responses_events, "openai_responses")
    with pytest.raises(StreamError, match="'openai_responses'"):
        accumulate(responses_events, "anthropic")


class HelperChunk(BaseModel):
    """`chat.completions.stream()`'s wrapper around one chunk; never dumped by an adapter
    that does not read it (its `snapshot` would make that quadratic)."""

    type: str = "chunk"
    chunk: dict[str, Any]
    snapshot: dict[str, Any] = {}

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("dumped")


def test_the_chat_stream_helpers_chunks_into_another_adapter_raise_undumped() -> None:
    chunk = FIXTURES[FIRST["openai_chat"]]["events"][0]
    with pytest.raises(StreamError, match="OpenAI Chat Completions chunks"):
        adapter_for("anthropic").feed(HelperChunk(chunk=chunk))


UNKNOWN: list[Any] = [
    {},
    {"type": "ping"},
    {"type": "future_event", "data": {"x": 1}},
    {"type": "keepalive"},
    {"object": "something.new"},
    {"usage": {"prompt_tokens": 1}},
    ": keep-alive",
]


@pytest.mark.parametrize("provider", sorted(ADAPTERS))
def test_unknown_events_alone_never_raise(provider: str) -> None:
    assert accumulate(UNKNOWN, provider) == []


@pytest.mark.parametrize("provider", sorted(ADAPTERS))
def test_unknown_events_inside_a_real_stream_change_nothing(provider: str) -> None:
    """Providers add event types: one among a stream's own events is skipped, as before."""
    events = FIXTURES[FIRST[provider]]["events"]
    mixed: list[Any] = []
    for event in events:
        mixed += [*UNKNOWN, event]
    plain = accumulate(events, provider)
    assert plain
    assert accumulate(mixed, adapter_for(provider)) == plain
