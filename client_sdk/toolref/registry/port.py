"""`Registry`: what a hydrator needs of a registry, as a small interface with two builds.

A backend's hydrator (`toolref.receiving.hydrator`) asks a registry to hydrate a request's
messages, to keep the conversation as a history, and for the messages of a history it does
not hold. How that call travels is the port's business, not the hydrator's:

- `HttpRegistry` wraps an `AsyncRegistryClient`: a chat backend whose registry runs
  elsewhere. The messages travel as JSON text; the answer comes back as text, split into
  messages here. It keeps no history, so the hydrator keeps the ones it confirmed.
- The service's gateway hydrates in process (`toolref_server.gateway.inprocess`): the
  messages it parsed once are handed to the registry's own steps, no request text, no
  middleware re-entered, and the registry's history cache is the one place each history is
  held (`holds_histories`).

The outcomes are frozen dataclasses; failures are `ToolrefError`s, raised (the same classes
whichever way the call travelled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolref import spans
from toolref.registry.answers import AppliedEdit
from toolref.registry.client import AsyncRegistryClient
from toolref.wire.models import FormatName, ReturnMessages


@dataclass(frozen=True, slots=True)
class Messages:
    """A request's messages as its client wrote them: the JSON array's text and, when the
    caller has parsed its body, each message's value and where each one's text lies in
    `source` (a port in process uses them as they are; one over HTTP sends `text`)."""

    text: str
    values: Sequence[Any] | None = None
    source: str = ""
    items: Sequence[tuple[int, int]] | None = None

    def texts(self) -> Sequence[str]:
        """Each message's text (sliced from `source` when its spans are known, else read
        from `text`): linear in the messages."""
        if self.items is not None:
            return [self.source[start:end] for start, end in self.items]
        return elements(self.text)


@dataclass(frozen=True, slots=True)
class Hydration:
    """A hydrate answered: each message's text, hydrated (the whole conversation, or with
    `returned == "new"` only the request's own), what was kept, and the refs of the calls.
    `texts` is None when the answer came as one array text (`text`), split by the caller
    (`split`), which may do it off the event loop."""

    texts: Sequence[str] | None
    returned: ReturnMessages
    history_ref: str | None
    checkpoint: tuple[str, int] | None  # (ref, length) of the prefix kept too
    tool_references: Mapping[str, str] = field(default_factory=dict)
    text: str = ""
    span: tuple[int, int] = (0, 0)  # of the messages array within `text`

    @property
    def size(self) -> int:
        """Characters of the messages answered."""
        if self.texts is not None:
            return sum(map(len, self.texts)) + max(len(self.texts) - 1, 0) + 2
        return self.span[1] - self.span[0]

    def split(self) -> Sequence[str]:
        """Each message's text (linear in the answer, no copy of it whole)."""
        if self.texts is not None:
            return self.texts
        return elements(self.text, self.span[0])


def elements(text: str, at: int = 0) -> tuple[str, ...]:
    """The text of each element of the JSON array at `at` in `text`."""
    items, _ = spans.elements(text, at)
    return tuple(text[start:end] for _, start, end in items)


class Registry(Protocol):
    """What a hydrator needs of a registry; see the module docstring.

    holds_histories: the registry keeps every history it confirms in full, so answering
        the whole conversation costs it nothing: the hydrator then keeps none itself.
    location: where the registry is, for messages ("the registry at URL").
    """

    @property
    def holds_histories(self) -> bool: ...

    @property
    def location(self) -> str: ...

    async def hydrate(
        self,
        messages: Messages,
        format: FormatName | None,
        *,
        history_ref: str | None,
        keep_history: bool,
        return_messages: ReturnMessages,
        checkpoint: bool,
    ) -> Hydration:
        """Hydrate `messages` (continuing `history_ref`); keep the conversation as a
        history with `keep_history` (and its checkpoint with `checkpoint`); answer the
        whole conversation, or with "new" only `messages` (when the registry can)."""
        ...

    async def history(self, ref: str, format: FormatName | None) -> Hydration:
        """The messages of history `ref`, in full (`MissingHistoryError` when it is not
        held), keeping nothing."""
        ...

    async def apply_edit(self, data: bytes) -> AppliedEdit:
        """The request the edit `data` stands for, its recipe kept (segment 0 with its
        credentials name-only: the caller fills them); a refusal raised as its error."""
        ...

    async def verify(self) -> str | None:
        """None when the registry answers and accepts this caller; else what is wrong."""
        ...


class HttpRegistry:
    """The `Registry` over an `AsyncRegistryClient` (its breaker, retries and timeouts)."""

    holds_histories = False

    def __init__(self, client: AsyncRegistryClient) -> None:
        self.client = client

    @property
    def location(self) -> str:
        return f"the registry at {self.client.base_url}"

    async def hydrate(
        self,
        messages: Messages,
        format: FormatName | None,
        *,
        history_ref: str | None,
        keep_history: bool,
        return_messages: ReturnMessages,
        checkpoint: bool,
    ) -> Hydration:
        answer = await self.client.hydrate_text(
            messages.text,
            format,
            history_ref=history_ref,
            keep_history=keep_history,
            return_messages=return_messages,
            checkpoint=checkpoint,
        )
        return Hydration(
            None,
            answer.returned,
            answer.history_ref,
            answer.checkpoint,
            answer.tool_references,
            answer.text,
            answer.messages,
        )

    async def history(self, ref: str, format: FormatName | None) -> Hydration:
        answer = await self.client.hydrate_text("[]", format, history_ref=ref, keep_history=False)
        return Hydration(None, "all", None, None, {}, answer.text, answer.messages)

    async def apply_edit(self, data: bytes) -> AppliedEdit:
        return await self.client.apply_edit(data)

    async def verify(self) -> str | None:
        return await self.client.verify()


def registry_port(registry: Registry | AsyncRegistryClient) -> Registry:
    """`registry` as a port: a client is wrapped in `HttpRegistry`."""
    if isinstance(registry, AsyncRegistryClient):
        return HttpRegistry(registry)
    return registry
