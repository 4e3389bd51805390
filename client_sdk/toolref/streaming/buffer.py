"""ToolBuffer: normalized chunks in, complete tool calls out."""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Any, Final

from toolref.streaming.arguments import (
    MAX_ARRAY_GAP,
    apply_patch,
    join_pieces,
    json_length,
    patch_change,
)
from toolref.streaming.call import CallStatus, ToolCall
from toolref.streaming.chunk import ABORTED, ArgPatch, ToolChunk
from toolref.streaming.depth import MAX_DEPTH, TooDeepError, checked_depth, loads_arguments
from toolref.streaming.event import (
    ArgumentsProgress,
    CallCompleted,
    CallFailed,
    CallStarted,
    ToolEvent,
)
from toolref.wire.errors import ChunkSequenceError, ConfigurationError

_NO_EVENTS: tuple[ToolEvent, ...] = ()
_FREEFORM = frozenset(("custom", "custom_tool_call"))
_COMPACT: Final[dict[str, Any]] = {"ensure_ascii": False, "separators": (",", ":")}
MAX_CALLS = 1024  # calls one response may hold, by default
MAX_ARGUMENT_CHARS = 16 * 1024 * 1024  # argument characters one response may hold, by default


class _Slot:
    """The mutable state of one call while it streams."""

    __slots__ = (
        "closed",
        "id",
        "index",
        "kind",
        "last_progress",
        "length",
        "meta",
        "name",
        "obj",
        "parent_id",
        "parts",
        "pieces",
        "provider_executed",
        "seq",
        "turn",
    )

    def __init__(self, turn: int, index: int, seq: int) -> None:
        self.turn = turn
        self.index = index
        self.seq = seq  # 1-based opening order: names the call if the provider gave no id
        self.id: str | None = None
        self.name: str | None = None
        self.kind = "function"
        self.provider_executed = False
        self.parts: list[str] = []  # joined once at the end: `+=` per chunk is quadratic
        self.length = 0  # characters held: of `parts`, or of `obj` as JSON (about, for patches)
        self.obj: dict[str, Any] | None = None  # set when arguments arrive as an object
        self.pieces = False  # whether `obj` holds strings appended in pieces, not joined yet
        self.meta: dict[str, Any] = {}
        self.parent_id: str | None = None
        self.closed = False
        self.last_progress = -math.inf


def _joined(slot: _Slot) -> dict[str, Any] | None:
    """The call's object arguments, strings appended in pieces joined (once, when read)."""
    if slot.pieces and slot.obj is not None:
        join_pieces(slot.obj)
    slot.pieces = False
    return slot.obj


def _patched_at_most(
    snapshot: str | Mapping[str, Any] | None, slot: _Slot | None, patches: Sequence[ArgPatch]
) -> int:
    """The characters `patches` will change (`patch_change`), before they are applied: less
    each value set again, except where a patch of the same chunk set its leaf, an object
    above it or a leaf below it before (then at most: the value's own). O(patches' paths +
    the values they replace)."""
    if isinstance(snapshot, Mapping):
        obj: dict[str, Any] | None = dict(snapshot)
    else:
        obj = slot.obj if slot is not None and snapshot is None else None
    total = 0
    touched: dict[Any, Any] = {}  # a trie of the chunk's paths so far; a set leaf holds _SET
    for patch in patches:
        node, overlaps = touched, False
        for part in patch.path:
            node = node.setdefault(part, {})
            overlaps = overlaps or _SET in node
        overlaps = overlaps or len(node) > 1 or (bool(node) and _SET not in node)
        node[_SET] = True
        total += patch_change(None if overlaps else obj, patch)
    return total


_SET: Final = object()  # in `_patched_at_most`'s trie: a patch of the chunk set this path


def _checked_limit(name: str, value: int) -> int:
    if type(value) is not int or value < 1:
        raise ConfigurationError(
            f"ToolBuffer({name}={value!r}): a limit is a whole number of 1 or more; leave it "
            "out for the default"
        )
    return value


def _merge(into: MutableMapping[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        current = into.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            _merge(current, value)
        else:
            into[key] = copy.deepcopy(value)


class ToolBuffer:
    """Accumulates the chunks of one streamed response into complete tool calls.

    Feed it `ToolChunk`s from an adapter (`feed` returns the events they caused), then
    `close()` at the end of the stream for the calls in call order. Calls close on their
    provider's signal or at the end of their turn; calls cut off by truncation, an error
    or `abort()` are `incomplete`, and arguments that are not a JSON object make a call
    `invalid`: neither is ever `runnable`. Ids are unique within the buffer.

    `progress_interval` throttles `ArgumentsProgress` events per call (seconds; `0` for
    every delta, `None` for none).

    Limits, for a stream that is broken or hostile: `max_calls` (default 1024) calls in the
    response, all turns together, and `max_argument_chars` (default 16 MiB) characters of
    arguments held for all of them (object arguments count as their JSON; a snapshot
    replaces what its call held). A chunk past either raises `ChunkSequenceError` naming the
    setting (`error.extra`: `limit`, `maximum`), and is not applied (so is a patch setting an
    array element more than `max_array_gap`, an attribute, default 1024, past its end, and
    an object snapshot or patch nesting the arguments past `max_depth`, an attribute,
    default 256 levels: `depth`). Argument text nested past `max_depth` makes the call
    `invalid`, its text kept, as any other text that is not a JSON object.
    """

    max_array_gap: int = MAX_ARRAY_GAP  # gaps are filled with nulls: bounded
    max_depth: int = MAX_DEPTH  # levels of arrays and objects in one call's arguments

    def __init__(
        self,
        *,
        progress_interval: float | None = 0.05,
        clock: Callable[[], float] = time.monotonic,
        max_calls: int = MAX_CALLS,
        max_argument_chars: int = MAX_ARGUMENT_CHARS,
    ) -> None:
        self._interval = progress_interval
        self._clock = clock
        self.max_calls = _checked_limit("max_calls", max_calls)
        self.max_argument_chars = _checked_limit("max_argument_chars", max_argument_chars)
        self._chars = 0  # argument characters held, all calls together
        self._slots: dict[tuple[int, int], _Slot] = {}
        # The open calls of each turn, so that finishing a turn costs its own calls only
        # (walking every slot per finished turn was quadratic in the number of turns).
        self._open_in: dict[int, dict[int, _Slot]] = {}
        self._calls: dict[tuple[int, int], ToolCall] = {}
        self._ids: set[str] = set()
        self._ended: set[int] = set()
        self._closed = False
        self._suffixes: dict[str, int] = {}  # id -> next suffix to try when it repeats
        self.finish_reasons: dict[int, str] = {}
        self.errors: dict[int, tuple[str | None, str]] = {}

    # --- feeding ---

    def feed(self, chunk: ToolChunk) -> Sequence[ToolEvent]:
        """Apply one chunk; raise `ChunkSequenceError` for a sequence no provider produces."""
        if self._closed:
            raise ChunkSequenceError(
                "chunk fed after close() or abort(); use a new ToolBuffer per response"
            )
        try:
            index = chunk.index
            turn = chunk.turn
        except AttributeError:  # a raw provider event (a str has .index): free for a chunk
            raise TypeError(
                f"feed() takes a toolref.streaming.ToolChunk, not a {type(chunk).__name__} "
                f"({chunk!r:.80}): turn provider events into chunks with an adapter, "
                f"adapter_for('openai_chat').feed(event), or use accumulate(events, provider)"
            ) from None
        if index is None:
            return self._turn_chunk(chunk)
        key = (turn, index)
        slot = self._slots.get(key)
        events: Sequence[ToolEvent] = _NO_EVENTS
        if slot is not None and slot.closed:
            return self._after_close(key, chunk)
        length = self._measured(slot, chunk)  # refuses a chunk past max_argument_chars
        if slot is None:
            slot = self._open(chunk)
            events = [CallStarted(chunk.turn, index, chunk.id, chunk.name)]
        patched = self._apply(slot, chunk)
        if length is not None:
            length += patched  # patches of one chunk that overlap: as they left it
            self._chars += length - slot.length
            slot.length = length
        if chunk.error is not None:
            return [*events, self._finish(slot, chunk.error, chunk.error_type)]
        if chunk.done:
            return [*events, self._finish(slot)]
        if chunk.args_delta is not None or chunk.args_snapshot is not None or chunk.args_patch:
            return self._progress(slot, events)
        return events

    def feed_all(self, chunks: Iterable[ToolChunk]) -> list[ToolEvent]:
        events: list[ToolEvent] = []
        for chunk in chunks:
            events.extend(self.feed(chunk))
        return events

    def _open(self, chunk: ToolChunk) -> _Slot:
        index = chunk.index
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ChunkSequenceError(
                f"call index {index!r} is not a non-negative integer; adapters number calls "
                "from 0 within a turn"
            )
        if chunk.turn in self._ended:
            raise ChunkSequenceError(
                f"call {index} of turn {chunk.turn} started after that turn finished; a turn's "
                "finish chunk must come after all of its calls"
            )
        if len(self._slots) >= self.max_calls:
            raise ChunkSequenceError(
                f"call {index} of turn {chunk.turn} would be call {len(self._slots) + 1} of "
                f"this response, over max_calls={self.max_calls}; a response holds a few "
                "calls, so the stream is broken or hostile. If it is genuine, give "
                "ToolBuffer(max_calls=...) a larger limit",
                limit="max_calls",
                maximum=self.max_calls,
            )
        slot = _Slot(chunk.turn, index, len(self._slots) + 1)
        self._slots[(chunk.turn, index)] = slot
        self._open_in.setdefault(chunk.turn, {})[index] = slot
        return slot

    def _measured(self, slot: _Slot | None, chunk: ToolChunk) -> int | None:
        """The argument characters the call will hold with `chunk`, but for its patches
        (`None`: unchanged); `ChunkSequenceError` when the response's would pass
        `max_argument_chars`. Costs the chunk's own size, and the values its patches set
        again (dropped by them)."""
        snapshot, patches, delta = chunk.args_snapshot, chunk.args_patch, chunk.args_delta
        if snapshot is None and not patches and delta is None:
            return None
        checked_depth(chunk, self.max_depth, slot.name if slot is not None else None)
        held = 0 if slot is None else slot.length
        length = held
        if isinstance(snapshot, str):
            length = len(snapshot)
        elif snapshot is not None:
            length = json_length(snapshot)
        patched = _patched_at_most(snapshot, slot, patches) if patches else 0
        length += patched
        if delta is not None:
            length += len(delta)
        total = self._chars - held + length
        if total > self.max_argument_chars:
            name = (slot.name if slot is not None else None) or chunk.name or "unnamed"
            raise ChunkSequenceError(
                f"call {chunk.index} ({name}) of turn {chunk.turn} would bring this "
                f"response's arguments to {total} characters, over max_argument_chars="
                f"{self.max_argument_chars}; a model writes far less, so the stream is "
                "broken or hostile. If it is genuine, give ToolBuffer(max_argument_chars=...) "
                "a larger limit",
                limit="max_argument_chars",
                maximum=self.max_argument_chars,
            )
        return length - patched  # `feed` adds the patches as applied (less, if they overlap)

    def _apply(self, slot: _Slot, chunk: ToolChunk) -> int:
        """Apply `chunk` to `slot`; the characters its patches changed (`patch_change`)."""
        if chunk.id:
            if slot.id is None or chunk.done:
                slot.id = chunk.id  # a closing chunk is authoritative (Responses' done item)
            elif slot.id != chunk.id:
                raise ChunkSequenceError(
                    f"call {slot.index} has id {slot.id!r}, and a chunk for it carries id "
                    f"{chunk.id!r}; a call has one id (open a new index for a new call)"
                )
        if chunk.name:
            slot.name = chunk.name
        if chunk.kind is not None:
            slot.kind = chunk.kind
        if chunk.provider_executed is not None:
            slot.provider_executed = chunk.provider_executed
        if chunk.parent_id is not None:
            slot.parent_id = chunk.parent_id
        if chunk.meta:
            _merge(slot.meta, chunk.meta)
        patched = 0
        snapshot = chunk.args_snapshot
        if isinstance(snapshot, str):
            slot.parts = [snapshot]
            slot.obj, slot.pieces = None, False
        elif snapshot is not None:
            slot.parts = []
            slot.obj, slot.pieces = copy.deepcopy(dict(snapshot)), False
        if chunk.args_patch:
            if slot.obj is None:
                if "".join(slot.parts).strip():
                    self._mixed(slot)
                slot.obj = {}
            for patch in chunk.args_patch:
                patched += patch_change(slot.obj, patch)
                slot.pieces = apply_patch(slot.obj, patch, self.max_array_gap) or slot.pieces
        if chunk.args_delta is not None:
            if slot.obj is not None:
                self._mixed(slot)
            slot.parts.append(chunk.args_delta)
        return patched

    @staticmethod
    def _mixed(slot: _Slot) -> None:
        raise ChunkSequenceError(
            f"call {slot.index} ({slot.name or 'unnamed'}) got argument text and object "
            "arguments (an object snapshot or patches); a call streams one or the other "
            "(send a snapshot to switch)"
        )

    def _progress(self, slot: _Slot, events: Sequence[ToolEvent]) -> Sequence[ToolEvent]:
        if self._interval is None:
            return events
        now = self._clock()
        if now - slot.last_progress < self._interval:
            return events
        slot.last_progress = now
        obj = _joined(slot)
        snapshot = copy.deepcopy(obj) if obj is not None else None
        progress = ArgumentsProgress(
            slot.turn, slot.index, slot.id, slot.name, slot.parts, len(slot.parts), snapshot
        )
        return [*events, progress]

    def _after_close(self, key: tuple[int, int], chunk: ToolChunk) -> Sequence[ToolEvent]:
        content = (chunk.args_delta, chunk.args_snapshot, chunk.args_patch, chunk.error)
        if any(part is not None for part in (*content, chunk.id, chunk.name)):
            raise ChunkSequenceError(
                f"call {key[1]} of turn {key[0]} got more content after it closed; "
                "a closed call takes only metadata"
            )
        if chunk.meta:
            call = self._calls[key]
            meta = copy.deepcopy(dict(call.meta))
            _merge(meta, chunk.meta)
            self._calls[key] = replace(call, meta=meta)
        return _NO_EVENTS

    def _turn_chunk(self, chunk: ToolChunk) -> Sequence[ToolEvent]:
        if chunk.id or chunk.name or chunk.args_delta or chunk.args_snapshot or chunk.args_patch:
            raise ChunkSequenceError(
                "a chunk without a call index carries call content (id, name or arguments); "
                "set `index` to the call it belongs to"
            )
        turn = chunk.turn
        if chunk.finish_reason is not None:
            self.finish_reasons[turn] = chunk.finish_reason
        events: list[ToolEvent] = []
        if chunk.error is not None:
            self.errors.setdefault(turn, (chunk.error_type, chunk.error))
            events = self._finish_turn(turn, chunk.error, chunk.error_type)
        elif chunk.done:
            events = self._finish_turn(turn, None, None)
        if chunk.done or chunk.error is not None:
            self._ended.add(turn)
        return events

    def _finish_turn(self, turn: int, error: str | None, error_type: str | None) -> list[ToolEvent]:
        """Close the turn's open calls, in index order: O(k log k) for its k open calls."""
        still_open = self._open_in.pop(turn, {})
        return [
            self._finish(slot, error, error_type)
            for slot in sorted(still_open.values(), key=lambda s: s.index)
        ]

    # --- finishing ---

    def close(self) -> list[ToolCall]:
        """The stream ended: close every open call as it stands; the calls in call order."""
        if not self._closed:
            for slot in self._open_slots():
                self._finish(slot)
            self._closed = True
        return self.calls()

    def abort(self, reason: str = "the stream was aborted") -> list[ToolCall]:
        """The stream was cut off: every open call becomes incomplete; the calls in order."""
        if not self._closed:
            for slot in self._open_slots():
                self._finish(slot, reason, ABORTED)
            self._closed = True
        return self.calls()

    def calls(self) -> list[ToolCall]:
        """Closed calls so far, ordered by turn and call index."""
        return [self._calls[key] for key in sorted(self._calls)]

    @property
    def has_tool_calls(self) -> bool:
        """True when some call is runnable, whatever finish reason the provider gave."""
        return any(call.runnable for call in self._calls.values())

    def _open_slots(self) -> list[_Slot]:
        return [self._slots[key] for key in sorted(self._slots) if not self._slots[key].closed]

    def _finish(
        self, slot: _Slot, error: str | None = None, error_type: str | None = None
    ) -> CallCompleted | CallFailed:
        slot.closed = True
        still_open = self._open_in.get(slot.turn)
        if still_open is not None:
            still_open.pop(slot.index, None)
            if not still_open:
                del self._open_in[slot.turn]
        raw, arguments, status, error = self._parse(slot, error)
        call = ToolCall(
            index=slot.index,
            id=self._unique_id(slot),
            name=slot.name or "",
            status=status,
            arguments=arguments,
            raw_arguments=raw,
            error=error,
            error_type=error_type if status is CallStatus.INCOMPLETE else None,
            turn=slot.turn,
            kind=slot.kind,
            provider_executed=slot.provider_executed,
            parent_id=slot.parent_id,
            meta=slot.meta,
        )
        self._calls[(slot.turn, slot.index)] = call
        return CallCompleted(call) if status is CallStatus.COMPLETE else CallFailed(call)

    def _parse(
        self, slot: _Slot, error: str | None
    ) -> tuple[str, dict[str, Any] | None, CallStatus, str | None]:
        _joined(slot)
        raw = "".join(slot.parts) if slot.obj is None else json.dumps(slot.obj, **_COMPACT)
        if error is not None:
            return raw, None, CallStatus.INCOMPLETE, error
        if slot.kind in _FREEFORM:  # Responses custom tools take text, not JSON
            value: Any = {"input": raw}
        elif slot.obj is not None:
            value = slot.obj
        elif not raw.strip():
            value = {}  # many providers send "" for a tool without arguments
        else:
            try:
                value = loads_arguments(raw, self.max_depth)
            except TooDeepError as exc:
                return raw, None, CallStatus.INVALID, f"arguments are {exc} (max_depth)"
            except ValueError as exc:
                return raw, None, CallStatus.INVALID, f"arguments are not valid JSON: {exc}"
        if not isinstance(value, dict):
            kind = type(value).__name__
            return raw, None, CallStatus.INVALID, f"arguments are a JSON {kind}, not an object"
        if not slot.name:
            return raw, None, CallStatus.INVALID, "no tool name arrived for this call"
        return raw, value, CallStatus.COMPLETE, None

    def _unique_id(self, slot: _Slot) -> str:
        wanted = slot.id
        if not wanted:
            # Numbered by opening order, not closing order: Gemini keeps whole calls open
            # until the turn ends while Vertex closes streamed ones at once.
            wanted = f"call_toolref_{slot.seq}"
            slot.meta["synthesized_id"] = True
        elif wanted in self._ids:
            slot.meta["original_id"] = wanted
        if wanted in self._ids:
            n = self._suffixes.get(wanted, 2)
            while f"{wanted}_{n}" in self._ids:
                n += 1
            self._suffixes[wanted] = n + 1
            wanted = f"{wanted}_{n}"
        self._ids.add(wanted)
        return wanted
