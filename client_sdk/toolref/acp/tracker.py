"""ToolCallTracker: ACP `session/update` notifications that carry only what changed."""

from __future__ import annotations

import copy
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolref.acp.bounds import MAX_VALUE_BYTES, checked_max_bytes
from toolref.acp.builder import (
    Change,
    UpdateBuilder,
    as_status,
    checked_json,
    checked_title,
    clean,
    item_list,
)
from toolref.acp.content import text_content
from toolref.acp.finished import refuse_after_finish
from toolref.acp.items import checked_content, checked_location
from toolref.acp.kind import ToolKind, as_kind, checked_kinds, tool_kind
from toolref.acp.plan import plan_entries
from toolref.acp.state import ATTRIBUTES, FIELDS, FINAL, ToolCallState, ToolCallStatus, digest
from toolref.acp.title import locations_for, title_for
from toolref.streaming.call import CallStatus, ToolCall
from toolref.wire.encoding import LONE_SURROGATE, dumps_json, surrogates_escaped
from toolref.wire.errors import AcpError, DuplicateToolCallError, UnknownToolCallError

Notification = dict[str, Any]
_COLLECTIONS = frozenset(("content", "locations"))
KEEP_FINISHED = 256  # finished calls whose state a tracker keeps, by default
MAX_RUNNING = 1024  # calls a tracker holds running at once, by default
_Held = tuple[float, int, str]  # (held since, hold number, call id): one entry of `_due`


def _check_id(call_id: Any) -> None:
    if not isinstance(call_id, str) or not call_id:
        raise AcpError(
            f"tool call id {call_id!r} must be a non-empty string: give the id of the call, "
            "as the model's tool call carries it"
        )
    if LONE_SURROGATE.search(call_id) is not None:
        raise AcpError(
            f"tool call id {call_id!r:.80} holds a lone UTF-16 surrogate, which serde_json "
            "refuses (Rust ACP clients lose every notification of the call); give an id "
            "UTF-8 carries",
            toolCallId=call_id.encode("utf-8", "backslashreplace").decode(),
        )


def _size(update: Mapping[str, Any]) -> int:
    return len(dumps_json(update))


def _measure(name: str, value: Any) -> tuple[bytes, int]:
    """A field's digest, and its bytes as a member of a compact JSON object (`"k":v`)."""
    return digest(value), _size({name: value}) - 2


def _object_size(members: Iterable[int]) -> int:
    """The bytes of a compact JSON object of members of these sizes: braces and commas."""
    sizes = list(members)
    return 2 + sum(sizes) + max(len(sizes) - 1, 0)


@dataclass(slots=True)
class _Call:
    current: ToolCallState
    sent: dict[str, bytes] = field(default_factory=dict)  # ACP field -> digest the client has
    held_since: float | None = None  # set while an update waits to coalesce
    held_seq: int = 0  # the number of that hold: which `_due` entry is the live one
    # ACP field -> (digest, member bytes) of its current value, but for the `dirty` ones:
    # a send hashes only the fields changed since the last, O(their size), not the call's.
    known: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=lambda: set(FIELDS.values()))

    def changes(self) -> list[str]:
        """The fields whose values the client does not have yet, in wire order."""
        for name in self.dirty:
            value = self.current.field(name)
            if value is None:
                self.known.pop(name, None)
            else:
                self.known[name] = _measure(name, value)
        self.dirty.clear()
        return [
            name
            for name in FIELDS.values()
            if name in self.known and self.sent.get(name) != self.known[name][0]
        ]


class ToolCallTracker:
    """Tracks the tool calls of one ACP session and emits minimal notifications.

    `start` sends `tool_call` once per id; `update(id)...send()` sends a `tool_call_update`
    holding only the fields whose values changed since the client last heard (compared by
    content hash, so an edit inside one content item counts), collections whole (`[]` to
    clear), never `null`, and nothing at all when nothing changed.

    `window` (seconds) coalesces: an update is held, later ones merge into it (latest value
    of each field), and it goes out when the window has passed (`due()`, or the next update
    after it), on `flush()`, or at once when the status becomes `completed` or `failed`.
    `full_objects=True` is for clients that expect complete objects: every update then
    carries the whole state. Every notification also goes to `sink`, when given; one the
    sink raised on counts as not sent (its changes stay pending, a start leaves the id free).

    `kinds` (tool name -> ACP kind) overrides the kind table for `start_call`; each kind is
    checked here (`AcpError` listing ACP v1's kinds).

    `max_value_bytes` bounds the JSON of each value given (a `rawInput` or `rawOutput`, a
    content item, a location; 16 MiB by default): one reusing an object under many keys is
    written out at each use, and past the bound `AcpError` names it where it is given
    (`bounds`, with the depth bound: what a JSON-RPC line serde_json parses takes).

    A call is finished once `completed` or `failed` has gone out: v1 has no status after
    those, so a later update raises `AcpError`. The tracker then keeps only its state (for
    `state()`), and only of the last `keep_finished` finished calls: memory is bounded by
    the calls still running, however long the session.

    Bounds: at most `max_running` calls running at once (default 1024; a `start` past it
    raises `AcpError` with the count: send `completed` or `failed` as each call ends, or
    give a larger `max_running`), `keep_finished` finished ones (default 256). The
    duplicate check sees only those: an id finished and forgotten may be announced again,
    and clients then reset the call they show for it. `due()` and `flush()` cost the
    updates held, not the calls running; a repeat of what a finished call shows costs the
    fields it names.
    """

    def __init__(
        self,
        session_id: str,
        *,
        window: float = 0.0,
        full_objects: bool = False,
        sink: Callable[[Notification], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        kinds: Mapping[str, ToolKind | str] | None = None,
        keep_finished: int = KEEP_FINISHED,
        max_running: int = MAX_RUNNING,
        max_value_bytes: int = MAX_VALUE_BYTES,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, (int, float)):
            raise AcpError(
                f"coalescing window {window!r} is not a number of seconds; use 0 to send at once"
            )
        if sink is not None and not callable(sink):
            raise AcpError(
                f"sink {sink!r} is not callable; pass a function taking each notification, "
                "such as sink=notifications.append"
            )
        if not isinstance(session_id, str) or not session_id:
            raise AcpError(
                f"session id {session_id!r} must be a non-empty string: give the sessionId "
                "the client got from session/new"
            )
        if window < 0:
            raise AcpError(f"coalescing window {window!r} is negative; use 0 to send at once")
        if type(keep_finished) is not int or keep_finished < 0:
            raise AcpError(
                f"keep_finished {keep_finished!r} is not a count; give 0 or more finished "
                "calls to keep"
            )
        if type(max_running) is not int or max_running < 1:
            raise AcpError(
                f"max_running {max_running!r} is not a count; give 1 or more calls to hold "
                f"running at once (default {MAX_RUNNING})"
            )
        if type(full_objects) is not bool:
            raise AcpError(
                f"full_objects {full_objects!r} is not a bool; give True or False: True for "
                "clients that expect every update as the whole call, False (the default) to "
                "send only what changed"
            )
        self.session_id = session_id
        self.window = window
        self.full_objects = full_objects
        self._sink = sink
        self._clock = clock
        self._kinds = checked_kinds(kinds) if kinds is not None else None
        self._calls: dict[str, _Call] = {}  # the calls not yet finished
        # The last ones finished, oldest first: an OrderedDict, as dropping the oldest of a
        # plain dict rescans the slots freed at its front (O(keep_finished) per drop).
        self._finished: OrderedDict[str, ToolCallState] = OrderedDict()
        self.keep_finished = keep_finished
        self.max_running = max_running
        self.max_value_bytes = checked_max_bytes(max_value_bytes)
        # A heap of held updates by time held, checked against their call when popped
        # (stale once sent or finished); rebuilt when over 2 * running + 64 entries.
        self._due: list[_Held] = []
        self._holds = 0
        self._plan: bytes | None = None
        self.bytes_sent = 0  # compact JSON bytes of the `update` objects sent
        self.bytes_full = 0  # what sending every update as the full object would have cost
        self.notifications = 0

    # --- tool calls ---

    def start(
        self,
        call_id: str,
        title: str,
        *,
        kind: ToolKind | str = ToolKind.OTHER,
        status: ToolCallStatus | str = ToolCallStatus.PENDING,
        content: Iterable[Mapping[str, Any]] = (),
        locations: Iterable[Mapping[str, Any]] = (),
        raw_input: Any = None,
        raw_output: Any = None,
    ) -> list[Notification]:
        """Announce a call with `tool_call` (sent at once: updates must come after it)."""
        _check_id(call_id)
        if call_id in self._calls or call_id in self._finished:
            raise DuplicateToolCallError(
                f"tool call {call_id!r} was already announced; a second tool_call makes "
                "clients reset it (Zed clears its content), so send updates instead",
                toolCallId=call_id,
            )
        checked_title(title, f"tool call {call_id!r}'s title")
        status = as_status(status)
        if status not in FINAL and len(self._calls) >= self.max_running:
            raise AcpError(
                f"tool call {call_id!r} would be running call {len(self._calls) + 1}, over "
                f"max_running={self.max_running}: each call is kept until its completed or "
                "failed status goes out, so send one as each call ends (a call left running "
                "is held for the whole session), or give ToolCallTracker(max_running=...) a "
                "larger limit",
                toolCallId=call_id,
                limit="max_running",
                running=len(self._calls),
                maximum=self.max_running,
            )
        most = self.max_value_bytes
        state = ToolCallState(
            id=call_id,
            title=title,
            kind=as_kind(kind),
            status=status,
            content=[checked_content(clean(item, most)) for item in item_list("content", content)],
            locations=[
                checked_location(clean(item, most)) for item in item_list("locations", locations)
            ],
            # later changes by the caller must not leak
            raw_input=copy.deepcopy(checked_json("rawInput", raw_input, most)),
            raw_output=copy.deepcopy(checked_json("rawOutput", raw_output, most)),
        )
        call = _Call(state)
        fields = state.fields()
        call.known = {name: _measure(name, value) for name, value in fields.items()}
        call.sent = {name: digest for name, (digest, _) in call.known.items()}
        call.dirty.clear()
        full = {"sessionUpdate": "tool_call", "toolCallId": call_id, **fields}
        # Clients start a call with empty content and locations: no need to say so.
        update = (
            full
            if self.full_objects
            else {k: v for k, v in full.items() if v != [] or k not in _COLLECTIONS}
        )
        self._calls[call_id] = call  # only once all of it is known to be sendable
        try:
            note = self._emit(update, _size(full))
        except BaseException:
            del self._calls[call_id]  # the client never heard of it: the id stays free
            raise
        if state.status in FINAL:
            self._retire(call)
        return [note]

    def start_call(self, call: ToolCall, *, title: str | None = None) -> list[Notification]:
        """Announce a streamed call (`toolref.streaming.ToolCall`): title and locations from
        its name and arguments, kind from the kind table, `rawInput` its arguments. Calls
        that arrived invalid or incomplete are announced as `failed`, with the reason.

        Whatever the model sent is announced: arguments `rawInput` cannot carry as JSON
        (nested past the depth bound, or holding a lone surrogate, which serde_json
        refuses) go as the text that arrived (a JSON string), and past `max_value_bytes`
        even as text, not at all. A title shows a lone surrogate as U+FFFD."""
        arguments = call.arguments if call.arguments is not None else {}
        usable = call.status is CallStatus.COMPLETE
        raw = surrogates_escaped(call.raw_arguments)
        return self.start(
            call.id,
            title or title_for(call.name, arguments),
            kind=tool_kind(call.name, arguments, overrides=self._kinds),
            status=ToolCallStatus.PENDING if usable else ToolCallStatus.FAILED,
            locations=locations_for(arguments),
            raw_input=self._carried(call.arguments if usable else {"INVALID_JSON": raw}, raw),
            content=() if usable else [text_content(f"not run: {call.error}")],
        )

    def _carried(self, arguments: Any, raw: str) -> Any:
        """A model's arguments as `rawInput` takes them: as given, else as their text, else
        none (`None`). Each try linear in the arguments, and bounded."""
        for value in (arguments, raw):
            try:
                return checked_json("rawInput", value, self.max_value_bytes)
            except AcpError:
                continue
        return None

    def update(self, call_id: str) -> UpdateBuilder:
        """A builder for changes to `call_id`; finish it with `.send()`. Once the call is
        finished (`completed` or `failed` went out) a send that changes nothing is dropped,
        and one that changes anything raises `AcpError`."""
        _check_id(call_id)
        if call_id not in self._finished:
            self._call(call_id)
        return UpdateBuilder(self, call_id)

    def apply(self, call_id: str, changes: Iterable[Change]) -> list[Notification]:
        """Apply builder changes to a call; the notifications sent now."""
        finished = self._finished.get(call_id)
        if finished is not None:
            return refuse_after_finish(finished, changes)
        call = self._call(call_id)
        state = call.current  # changed in place: a copy would cost the whole call each time
        for change in changes:
            # A builder's change names its field; another may touch any. Marked before it
            # runs: one that raised midway has changed the state in place all the same.
            name = getattr(change, "field", None)
            call.dirty.update((name,) if name in ATTRIBUTES else ATTRIBUTES)
            change(state)
        now = self._clock()
        if state.status in FINAL:
            notes = self._send(call)
            self._retire(call)
            return notes
        if self.window <= 0:
            return self._send(call)
        if call.held_since is None:
            self._hold(call, now)
            return []
        if now - call.held_since >= self.window:
            return self._send(call)
        return []

    def due(self) -> list[Notification]:
        """Send held updates whose coalescing window has passed (call it from your loop),
        oldest held first. O((d + s) log h): the d due and s stale entries of the h in the
        heap, which holds at most 2 * running + 64; calls not due are not looked at."""
        now = self._clock()
        notes: list[Notification] = []
        while self._due and now - self._due[0][0] >= self.window:
            notes.extend(self._send_held(heapq.heappop(self._due)))
        return notes

    def flush(self, call_id: str | None = None) -> list[Notification]:
        """Send held updates now: of one call, or of every call, oldest held first (a
        finished call holds none). Of every call: O(h log h), h the heap's entries."""
        if call_id is not None:
            if call_id in self._finished:
                return []
            call = self._call(call_id)
            return self._send(call) if call.held_since is not None else []
        notes: list[Notification] = []
        while self._due:
            notes.extend(self._send_held(heapq.heappop(self._due)))
        return notes

    def state(self, call_id: str) -> ToolCallState:
        """The call's current state (including changes still held for coalescing); of a
        finished call, while it is among the last `keep_finished`."""
        finished = self._finished.get(call_id)
        if finished is not None:
            return finished.copy()
        return self._call(call_id).current.copy()

    def pending(self, call_id: str) -> bool:
        """Whether the call has changes the client has not been sent yet."""
        if call_id in self._finished:
            return False  # its final update went out with everything it held
        return bool(self._call(call_id).changes())

    # --- plans ---

    def plan(self, source: Any) -> list[Notification]:
        """Send a whole `plan` from `todo_write`-style arguments (`{"todos": [...]}`),
        `update_plan`'s `{"plan": [...]}`, or a list of entries; unchanged plans are dropped."""
        entries = plan_entries(source)
        entries_digest = digest(entries)
        if entries_digest == self._plan:
            return []
        update = {"sessionUpdate": "plan", "entries": entries}
        note = self._emit(update, _size(update))  # a sink that raised leaves it unsent
        self._plan = entries_digest
        return [note]

    # --- internals ---

    def _call(self, call_id: str) -> _Call:
        call = self._calls.get(call_id)
        if call is None:
            raise UnknownToolCallError(
                f"tool call {call_id!r} was never announced; send start({call_id!r}, title) "
                "first (Zed shows an update for an unknown id as a failed 'Tool call not found')",
                toolCallId=call_id,
            )
        return call

    def _retire(self, call: _Call) -> None:
        """Forget what a finished call needs no more: its digests, and past
        `keep_finished`, the oldest finished calls altogether."""
        call_id = call.current.id
        del self._calls[call_id]
        if self.keep_finished == 0:
            return
        self._finished[call_id] = call.current
        while len(self._finished) > self.keep_finished:
            self._finished.popitem(last=False)  # O(1)

    def _hold(self, call: _Call, now: float) -> None:
        """Hold the call's update from `now`, and index it for `due()`: O(log h). Stale
        entries are dropped when they outnumber the live (at most one per running call):
        O(h) then, after h / 2 holds at least, so O(1) a hold amortized."""
        self._holds += 1
        call.held_since, call.held_seq = now, self._holds
        heapq.heappush(self._due, (now, self._holds, call.current.id))
        if len(self._due) > 2 * len(self._calls) + 64:
            self._due = [entry for entry in self._due if self._held(entry) is not None]
            heapq.heapify(self._due)

    def _held(self, entry: _Held) -> _Call | None:
        """The call an entry of `_due` stands for, while it still holds that update."""
        call = self._calls.get(entry[2])
        if call is None or call.held_since is None or call.held_seq != entry[1]:
            return None  # sent since, or finished
        return call

    def _send_held(self, entry: _Held) -> list[Notification]:
        """Send the update an entry of `_due` stands for, if still held; one the sink
        refused stays held, so its entry goes back."""
        call = self._held(entry)
        if call is None:
            return []
        try:
            return self._send(call)
        except BaseException:
            heapq.heappush(self._due, entry)
            raise

    def _send(self, call: _Call) -> list[Notification]:
        """Send what the client lacks: O(the changed fields' size), or O(the call's) with
        `full_objects` (what it sends)."""
        changed = call.changes()
        if not changed:
            call.held_since = None
            return []  # nothing the client does not already show
        head = {"sessionUpdate": "tool_call_update", "toolCallId": call.current.id}
        names = list(call.known) if self.full_objects else changed
        update = {**head, **{name: call.current.field(name) for name in names}}
        full_size = _object_size([_size(head) - 2, *(size for _, size in call.known.values())])
        before, held = dict(call.sent), call.held_since
        call.held_since = None
        call.sent.update((name, call.known[name][0]) for name in changed)
        try:
            note = self._emit(update, full_size)
        except BaseException:
            call.sent, call.held_since = before, held  # the client has none of it: pending
            raise
        return [note]

    def _emit(self, update: dict[str, Any], full_size: int) -> Notification:
        """Hand one notification to the sink; counted once the sink took it."""
        note = {"sessionId": self.session_id, "update": update}
        if self._sink is not None:
            self._sink(note)
        self.bytes_sent += _size(update)
        self.bytes_full += full_size
        self.notifications += 1
        return note


def jsonrpc(notification: Notification) -> dict[str, Any]:
    """The JSON-RPC message that carries a notification."""
    return {"jsonrpc": "2.0", "method": "session/update", "params": notification}
