"""What every provider adapter shares: event coercion and end-of-stream handling."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from toolref.streaming.adapters.detect import misuse, provider_of, provider_of_sdk_event
from toolref.streaming.chunk import ABORTED, TRUNCATED, ToolChunk
from toolref.streaming.depth import EVENT_DEPTH, loads_within
from toolref.wire.errors import ChunkSequenceError, StreamError
from toolref.wire.numbers import whole_number

DONE_SENTINEL = "[DONE]"


def as_event(event: Any) -> Mapping[str, Any] | None:
    """A provider event as a mapping; `None` for OpenAI's `[DONE]` sentinel.

    Takes dicts (what SSE decoders and boto3 give), SDK models (pydantic `model_dump`)
    and JSON text (an NDJSON line, an SSE `data:` payload or a whole SSE frame with its
    `event:` line; a frame with no data, such as a keep-alive comment, is an empty event).
    """
    if type(event) is dict or isinstance(event, Mapping):
        return event
    if isinstance(event, bytes | bytearray):
        try:
            event = event.decode()
        except UnicodeDecodeError as exc:
            raise ChunkSequenceError(f"stream event is not UTF-8 text: {exc}") from None
    if isinstance(event, str):
        text = event.removeprefix("\ufeff").strip()  # the BOM a stream may begin with
        if text.startswith(_SSE_FIELDS):
            text = _sse_data(text)
            if not text:
                return {}  # a comment or keep-alive frame: no event
        if text == DONE_SENTINEL:
            return None
        try:
            decoded = loads_within(text, EVENT_DEPTH)  # never RecursionError
        except ValueError as exc:
            raise ChunkSequenceError(
                f"stream event is not JSON ({exc}): {text[:80]!r}; pass decoded events or "
                "SSE data payloads"
            ) from None
        if not isinstance(decoded, dict):
            raise ChunkSequenceError(
                f"stream event is a JSON {type(decoded).__name__}, not an object"
            )
        return decoded
    dump = getattr(event, "model_dump", None)
    if callable(dump):
        # SDK stream helpers add the state so far as `snapshot` to every event; no adapter
        # reads it, and dumping it on every delta would be quadratic.
        dumped = dump(mode="json", by_alias=True, exclude_none=True, exclude={"snapshot"})
        if isinstance(dumped, dict):
            return dumped
    raise ChunkSequenceError(
        f"cannot read a {type(event).__name__} as a stream event; pass a dict, an SDK "
        "model or the JSON text of one event"
    )


_SSE_FIELDS = ("data:", "event:", "id:", "retry:", ":")
# SSE's line ends, and only those: `str.splitlines` also ends a line at U+2028, U+2029 and
# U+0085, which JSON carries raw inside strings, and cut such an event in two.
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


def _sse_data(frame: str) -> str:
    """The data of one SSE frame (`event:` and `id:` lines, comments ignored; several `data:`
    lines joined by newlines, as the SSE spec says). O(frame)."""
    lines = [line[5:] for line in _SSE_LINE_END.split(frame) if line.startswith("data:")]
    return "\n".join(line[1:] if line.startswith(" ") else line for line in lines).strip()


def pick(mapping: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A field under its wire (camelCase) or SDK (snake_case) name."""
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


def as_int(value: Any, what: str) -> int:
    if value is None:
        return 0  # SDK dumps write an absent index as null
    if isinstance(value, bool):
        raise ChunkSequenceError(f"{what} is a boolean ({value!r}); it must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        number = whole_number(value.strip())  # some servers send "0"
        if number is not None:
            return number
    raise ChunkSequenceError(f"{what} {value!r} is not an integer")


class StreamAdapter(ABC):
    """Turns one provider's raw stream events into `ToolChunk`s. One instance per response."""

    provider: ClassVar[str]

    def __init__(self) -> None:
        self._turns: set[int] = set()  # turns that have content
        self._finished: set[int] = set()  # turns whose terminal event arrived

    # Event types of this provider's wire; an SDK object of another type is an event an SDK
    # stream helper derived from them (text so far, arguments so far), skipped undumped.
    wire_types: ClassVar[frozenset[str] | None] = None

    def feed(self, event: Any) -> list[ToolChunk]:
        """The chunks one raw event contributes (often none: text, pings, usage)."""
        if type(event) is not dict and self.wire_types is not None:
            kind = getattr(event, "type", None)
            if isinstance(kind, str) and kind not in self.wire_types:
                self._refuse(provider_of_sdk_event(kind, event))
                return []
        return self._chunks(as_event(event))

    def _foreign(self, event: Mapping[str, Any]) -> None:
        """Raise `StreamError` when `event`, which this adapter found nothing in, is clearly
        another provider's (see `detect`); events of no provider in particular pass."""
        self._refuse(provider_of(event))

    def _refuse(self, found: tuple[str, str] | None) -> None:
        if found is not None and found[0] != self.provider:
            raise StreamError(
                misuse(found[0], found[1], self.provider), detected=found[0], adapter=self.provider
            )

    @abstractmethod
    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]: ...

    def end(self) -> list[ToolChunk]:
        """Chunks for the end of the stream: by default, turns that never got their
        terminal event were cut off, so their open calls are incomplete."""
        return [
            ToolChunk(
                turn=turn,
                error=f"the {self.provider} stream ended before its terminal event",
                error_type=ABORTED,
            )
            for turn in sorted(self._turns - self._finished)
        ]

    def _finish(
        self,
        turn: int,
        reason: str | None,
        error: str | None = None,
        error_type: str | None = None,
    ) -> ToolChunk:
        self._finished.add(turn)
        return ToolChunk(
            turn=turn, done=True, finish_reason=reason, error=error, error_type=error_type
        )

    def _fail_all(self, message: str, error_type: str = ABORTED) -> list[ToolChunk]:
        turns = sorted((self._turns | {0}) - self._finished)
        return [self._finish(turn, None, message, error_type) for turn in turns]


class BlockAdapter(StreamAdapter):
    """Providers that open and close each call as a content block (Anthropic, Bedrock).

    When tokens run out inside a call's JSON, these providers still close the block and only
    then say `max_tokens`, so the close of the last call is held back one event: if the stop
    reason is a truncation, that call is incomplete rather than closed.
    """

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, int] = {}  # provider block index -> call index
        self._count = 0  # calls opened; several block indexes may name one call
        self._started_with: dict[int, Any] = {}  # call index -> input in the start event
        self._got_delta: set[int] = set()
        self._held: int | None = None

    def _start(self, block: int, chunk_fields: dict[str, Any], start_input: Any) -> ToolChunk:
        index = self._blocks[block] = self._count
        self._count += 1
        self._turns.add(0)
        if start_input:
            self._started_with[index] = start_input
        return ToolChunk(index=index, **chunk_fields)

    def _delta(self, block: Any, text: Any) -> list[ToolChunk]:
        """Argument text for a tool block; deltas of other blocks (text) give nothing."""
        index = self._blocks.get(block)
        if index is None:
            number = whole_number(block.strip()) if isinstance(block, str) else None
            return [] if number is None else self._delta(number, text)
        if not text:
            return []
        out = self._release() if self._held is not None else []
        self._got_delta.add(index)
        out.append(ToolChunk(index=index, args_delta=text))
        return out

    def _stop(self, block: int) -> None:
        index = self._blocks.get(block)
        if index is not None:
            self._held = index

    def _release(
        self, stopped_by: str | None = None, error_type: str = TRUNCATED
    ) -> list[ToolChunk]:
        """The held close, as a close or (when the message was cut short) as incomplete."""
        index, self._held = self._held, None
        if index is None:
            return []
        if stopped_by is not None:
            return [self._cut(index, stopped_by, error_type)]
        return [self._closed(index)]

    @staticmethod
    def _cut(index: int, stopped_by: str, error_type: str) -> ToolChunk:
        return ToolChunk(
            index=index,
            error=f"stop reason {stopped_by!r} came while this call was the last thing "
            "generated; its arguments may be cut short",
            error_type=error_type,
        )

    def _closed(self, index: int) -> ToolChunk:
        """The close of a call, with its start input when no delta replaced it (proxies put
        the whole input in the start block and send no deltas)."""
        start_input = None if index in self._got_delta else self._started_with.get(index)
        return ToolChunk(index=index, args_snapshot=start_input or None, done=True)

    def end(self) -> list[ToolChunk]:
        return self._release() + super().end()
