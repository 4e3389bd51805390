"""`Registry`: what a receiver needs of a registry, as a small interface with two builds.

A backend's hydrator (`toolref.receiving.hydrator`) asks a registry to hydrate a request's
`toolRef` markers; its middleware (`toolref.receiving.restoring`) asks it to apply an edit.
How that call travels is the port's business, not the caller's:

- `HttpRegistry` wraps an `AsyncRegistryClient`: a chat backend whose registry runs
  elsewhere. The messages travel as JSON text; the answer comes back as text, split into
  messages here.
- The service's gateway hydrates in process (`toolref_server.gateway.inprocess`): the
  messages it parsed once are handed to the registry's own steps, no request text, no
  middleware re-entered.

The outcomes are frozen dataclasses; failures are `ToolrefError`s, raised (the same classes
whichever way the call travelled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolref.kit import spans
from toolref.registry.answers import AppliedEdit, HeldRequest, Reserve
from toolref.registry.client import AsyncRegistryClient
from toolref.wire.models import FormatName


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
    """A hydrate answered: each message's text, hydrated, and the refs of the calls.
    `texts` is None when the answer came as one array text (`text`), split by the caller
    (`split`), which may do it off the event loop."""

    texts: Sequence[str] | None
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
    """What a receiver needs of a registry; see the module docstring.

    location: where the registry is, for messages ("the registry at URL").
    """

    @property
    def location(self) -> str: ...

    async def hydrate(self, messages: Messages, format: FormatName | None) -> Hydration:
        """`messages` with their `toolRef` markers hydrated (full payloads registered)."""
        ...

    async def apply_edit(
        self,
        data: bytes,
        *,
        segments: bool = False,
        held: HeldRequest | None = None,
        reserve: Reserve | None = None,
    ) -> AppliedEdit:
        """The request the edit `data` stands for, its recipe kept (segment 0 with its
        credentials name-only: the caller fills them); a refusal raised as its error.
        `segments`: its segments too, what changed sent against `held` (the caller's copy
        of the edit's base, when it has one). `reserve`: told the body's bytes before it is
        built where it is built for the caller (what it raises, raised)."""
        ...

    async def keep_answer(self, ref: str, answer: bytes) -> None:
        """Keep the answer recipe `ref`'s request streamed, the dictionary of the next edit
        of it (`toolref.edits.answer`); a refusal raised as its error."""
        ...

    async def verify(self) -> str | None:
        """None when the registry answers and accepts this caller; else what is wrong."""
        ...

    async def edits(self) -> int:
        """The highest version of edits it applies (its capabilities' `edits`; 0: none),
        as it says now (asked again after the first call: a middleware asks once more when
        the registry refuses an edit as unreadable, rolled back, and while it applies fewer
        than the middleware: `toolref.receiving.registry_edits`); a refusal raised as its
        error."""
        ...


class HttpRegistry:
    """The `Registry` over an `AsyncRegistryClient` (its breaker, retries and timeouts)."""

    def __init__(self, client: AsyncRegistryClient) -> None:
        self.client = client
        self._asked = False  # `edits` asked once: the next asks the registry again

    @property
    def location(self) -> str:
        return f"the registry at {self.client.base_url}"

    async def hydrate(self, messages: Messages, format: FormatName | None) -> Hydration:
        answer = await self.client.hydrate_text(messages.text, format)
        return Hydration(None, answer.tool_references, answer.text, answer.messages)

    async def apply_edit(
        self,
        data: bytes,
        *,
        segments: bool = False,
        held: HeldRequest | None = None,
        reserve: Reserve | None = None,
    ) -> AppliedEdit:
        return await self.client.apply_edit(data, segments=segments, held=held, reserve=reserve)

    async def keep_answer(self, ref: str, answer: bytes) -> None:
        await self.client.keep_answer(ref, answer)

    async def verify(self) -> str | None:
        return await self.client.verify()

    async def edits(self) -> int:
        """The first time, what `verify` was answered; then asked again each time."""
        fresh, self._asked = self._asked, True
        return (await self.client.capabilities(fresh=fresh)).edits


def registry_port(registry: Registry | AsyncRegistryClient) -> Registry:
    """`registry` as a port: a client is wrapped in `HttpRegistry`."""
    if isinstance(registry, AsyncRegistryClient):
        return HttpRegistry(registry)
    return registry
