"""A request the gateway or the provider refused as too large (413): its inline tool
invocations, the ones worth registering so that a retry sends them as refs, and the
message the agent gets when even that is not enough.

Registering moves a payload off this request's wire: the gateway then hydrates it from the
registry. It helps when the limit is on what travels (a proxy's, the gateway's own); not
when the provider refuses the conversation itself, which only a shorter one fixes.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref import formats
from toolref.sending.rewrite import ref_of
from toolref.sending.transport import LLMRequest
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import ToolrefError

from .savings import size

WORTH_REGISTERING: Final = 1024  # bytes: smaller invocations barely change the body
NAMED: Final = 3  # the biggest invocations a refusal names


@dataclass(frozen=True, slots=True)
class InlineItem:
    """A complete tool invocation the request carries in full."""

    name: str
    call_id: str
    size: int  # bytes of its JSON (name, args, result, isError)
    ref: str
    invocation: dict[str, Any]


def inline_items(request: LLMRequest) -> list[InlineItem]:
    """The complete invocations in `request`'s messages, biggest first; [] when the
    messages cannot be read as their API's format."""
    try:
        messages = request.body[request.messages_key]
        found = formats.scan(messages, formats.detect(messages, request.format))
        items = [
            InlineItem(
                pair.name or "?",
                (pair.call.call_id if pair.call is not None else None) or pair.key,
                len(dumps_json(invocation := pair.invocation())),
                ref_of(pair),
                invocation,
            )
            for pair in found.complete
        ]
    except (ToolrefError, ValueError, TypeError):
        return []
    return sorted(items, key=lambda item: item.size, reverse=True)


def worth_registering(items: Sequence[InlineItem], held: Container[str]) -> list[InlineItem]:
    """The items to register before a retry: those the gateway does not hold already (a
    held one travels as a ref, or not at all after a history), and big enough to matter."""
    chosen: dict[str, InlineItem] = {}
    for item in items:
        if item.size >= WORTH_REGISTERING and item.ref not in held:
            chosen.setdefault(item.ref, item)
    return list(chosen.values())


def biggest(items: Sequence[InlineItem]) -> str:
    """The biggest items for a person: `read_file` (call toolu_01) 30.2 MB, ..."""
    named = [f"{i.name} (call {i.call_id}) {size(i.size)} ({i.size} bytes)" for i in items[:NAMED]]
    return "; ".join(named) if named else "no tool results"


def too_large_message(items: Sequence[InlineItem], tried: str) -> str:
    """What the agent is told when a request stays too large: what was tried, the biggest
    invocations, and what to do."""
    return (
        f"toolref relay: the request is too large for the gateway or the provider (413); "
        f"{tried}. Biggest tool results in it: {biggest(items)}. Shorten the conversation "
        "(/compact, or start a new one) or have the tool return less output"
    )
