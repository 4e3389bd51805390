"""OpenAI Chat Completions chunks, with the quirks of OpenAI-compatible servers.

Routing follows the merge rules in the streaming notes (§9): key by (choice, index) but open
a new call when a different id or a new name arrives at an index whose arguments are already
a complete JSON object; infer a missing index; keep the first id and set the name once;
replace instead of appending when a server resends the whole argument text so far. An index
merged by id into a call opened at another index (LocalAI; the first or the latest call with
that id in the choice, looked up by id) stays that call while its text repeats the call's,
and opens another once it departs from a finished object (one id on two calls,
OpenRouter). Whitespace-only argument text never opens a call.

A custom (freeform) tool's call (`type: "custom"`) streams `custom: {name, input}` in place
of `function: {name, arguments}`: it is a call of kind `custom` whose input is text, not
JSON, as the Responses adapter's `custom_tool_call` (`ToolBuffer` gives `{"input": text}`).
Its input is appended as streamed (no resend is read into it: text that begins with the
text so far is more text), and it is complete only when the turn finishes (freeform text
says nothing of its end). One call streaming both `function` and `custom` is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import StreamAdapter, as_int
from toolref.streaming.adapters.chat_kinds import CUSTOM, cut_off, settled, spec
from toolref.streaming.adapters.shape import Shape
from toolref.streaming.chunk import ABORTED, FILTERED, TRUNCATED, ToolChunk
from toolref.streaming.depth import EVENT_DEPTH, MAX_DEPTH, loads_within, value_too_deep
from toolref.wire.errors import ChunkSequenceError

_KNOWN = frozenset(("index", "id", "type", "function", "custom"))
_TRUNCATING = {"length": TRUNCATED, "content_filter": FILTERED}
_PLACEHOLDER_IDS = frozenset(("", "null", "None"))
# Characters a call's name may grow to, by default (providers allow 64 to 128): each
# fragment of a name streamed in pieces is told as the name so far, a copy of it, so an
# unbounded name made the stream quadratic in its length.
MAX_NAME_CHARS = 1024


def _carries(args: Any) -> bool:
    """Whether arguments carry anything: whitespace-only text does not (JSON ignores it), so
    it never opens a call (MiniMax-style resends of a blank fragment, or a newline after the
    object closed, made a phantom `{}` call that could run)."""
    return bool(args.strip()) if isinstance(args, str) else bool(args)


def _is_object(text: str) -> bool:
    try:
        return isinstance(loads_within(text, MAX_DEPTH), dict)
    except ValueError:
        return False


class _Alias:
    """An index whose fragments were merged, by id, into a call opened at another index
    (LocalAI sends one call at several indexes), until their text says otherwise."""

    __slots__ = ("at", "name")

    def __init__(self, name: str | None) -> None:
        self.at = 0  # characters of the call's text this index has resent so far
        self.name = name


class _Call:
    """What the adapter must remember of a call to route the next fragment."""

    __slots__ = (
        "cumulative",
        "id",
        "index",
        "is_object",
        "kind",
        "length",
        "name",
        "parts",
        "shape",
        "unscanned",
        "whole",
    )

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.parts: list[str] = []
        self.length = 0
        self.is_object = False
        self.cumulative = False  # latched once the server resent the whole text
        self.shape = Shape()  # the brackets of the text so far, read a delta at a time
        self.unscanned: list[str] = []  # text `shape` has not read yet
        self.whole: bool | None = None  # the strict parse, once the object closed
        self.kind: str | None = None  # "function" or `CUSTOM`, once a fragment says

    def replace(self, text: str) -> None:
        """The whole text so far is `text` (a cumulative server's resend)."""
        self.parts = [text]
        self.length = len(text)
        self.shape, self.unscanned, self.whole = Shape(), [text], None

    def append(self, text: str) -> None:
        self.parts.append(text)
        self.unscanned.append(text)
        self.length += len(text)

    def starts_with(self, text: str) -> bool:
        """Whether the text so far begins with `text`, read part by part: O(len(text)). A
        join here (the text so far, copied) on each short fragment after a cumulative
        resend made such a stream quadratic."""
        at, end = 0, len(text)
        for part in self.parts:
            if at >= end:
                break
            if not part.startswith(text[at : at + len(part)]):
                return False
            at += len(part)
        return at >= end

    def text(self) -> str:
        if len(self.parts) > 1:
            self.parts = ["".join(self.parts)]
        return self.parts[0] if self.parts else ""

    def complete(self) -> bool:
        """True when the arguments so far are a whole JSON object. Costs the text added
        since the last look (servers that resend a name or an id ask on every fragment);
        the text is parsed once, when its outer object closes. A custom call's text is never
        (freeform: only the turn's finish ends it)."""
        if self.kind == CUSTOM:
            return False
        if self.is_object:
            return True
        for piece in self.unscanned:
            self.shape.feed(piece)
        self.unscanned = []
        if not self.shape.closed:
            return False
        if self.whole is None:  # only whitespace can follow and keep it closed
            self.whole = _is_object(self.text())
        return self.whole


def _cut_at_end(call: _Call, turn: int) -> ToolChunk:
    text = call.text()
    shown = repr(text) if len(text) <= 60 else f"{len(text)} characters ending {text[-40:]!r}"
    return ToolChunk(
        index=call.index, turn=turn, error=cut_off(call.kind, shown), error_type=ABORTED
    )


class OpenAIChatAdapter(StreamAdapter):
    """`chat.completion.chunk` events (also Ollama `/v1`, vLLM, Groq, DeepSeek, Mistral...)."""

    provider = "openai_chat"
    # The SDK's `chat.completions.stream()` helper wraps each chunk in a `chunk` event and
    # derives content and argument events from them, each holding the text so far.
    wire_types = frozenset(("chunk",))
    # A setting: the characters a call's name may grow to (a larger one is refused, a
    # `ChunkSequenceError`); each fragment of a name costs the name so far, so at most this.
    max_name_chars: int = MAX_NAME_CHARS

    def __init__(self) -> None:
        super().__init__()
        self._by_key: dict[tuple[int, Any], _Call] = {}
        self._calls: dict[int, list[_Call]] = {}
        # (turn, id) -> the first and the latest call with that id: what a fragment with the
        # id at a new index may resend, found in O(1) (was a walk over the turn's calls).
        self._by_id: dict[tuple[int, str], tuple[_Call, ...]] = {}
        self._pending_meta: dict[int, dict[str, Any]] = {}
        self._aliases: dict[tuple[int, Any], _Alias] = {}
        self._seen_done = False

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:  # [DONE]
            self._seen_done = True
            return [self._finish(turn, None) for turn in sorted(self._turns - self._finished)]
        if event.get("type") == "chunk" and isinstance(event.get("chunk"), Mapping):
            event = event["chunk"]  # the helper's wrapper around one chunk
        out: list[ToolChunk] = []
        error = event.get("error")
        if error:
            message = error.get("message") if isinstance(error, Mapping) else error
            return self._fail_all(f"the server sent an error mid-stream: {message}")
        choices = event.get("choices")
        if not choices:
            self._foreign(event)  # another provider's stream: say so, not "no calls"
            return out  # usage chunk, Azure prompt_filter_results
        parent = event.get("id")
        for choice in choices:
            turn = choice.get("index")
            turn = 0 if turn is None else as_int(turn, "choice index")
            delta = choice.get("delta")
            if delta:
                calls = delta.get("tool_calls")
                if calls:
                    self._turns.add(turn)
                    for call in calls if isinstance(calls, list) else (calls,):
                        self._fragment(turn, call, parent, out)
                legacy = delta.get("function_call")
                if legacy:
                    self._turns.add(turn)
                    self._fragment(
                        turn, {"index": "function_call", "function": legacy}, parent, out
                    )
            reason = choice.get("finish_reason")
            if reason:  # after the deltas: servers put the last fragment in the same chunk
                self._turns.add(turn)
                kind = _TRUNCATING.get(reason)
                error_text = f"finish_reason {reason!r} cut the response short" if kind else None
                out.append(self._finish(turn, reason, error_text, kind))
        return out

    def end(self) -> list[ToolChunk]:
        """The end of the events is the end of the stream, as `[DONE]` would be: the openai
        SDK (and most SSE readers) swallow `[DONE]`, and some routers send no finish_reason,
        so nothing else marks the end. A call whose arguments are a whole JSON object is
        complete (an object cannot grow into another valid object); one whose arguments are
        not was cut off mid-arguments, and is incomplete."""
        if self._seen_done:
            return []
        out: list[ToolChunk] = []
        for turn in sorted(self._turns - self._finished):
            for call in self._calls.get(turn, ()):
                if not call.complete():
                    out.append(_cut_at_end(call, turn))
            out.append(self._finish(turn, None))
        return out

    def _fragment(
        self, turn: int, fragment: Mapping[str, Any], parent: Any, out: list[ToolChunk]
    ) -> None:
        raw_index = fragment.get("index")
        if raw_index is not None and raw_index != "function_call":
            raw_index = as_int(raw_index, "tool_calls[].index")
        call_id = fragment.get("id")
        if call_id is not None:
            call_id = str(call_id)  # Poolside sends integer ids
            if call_id in _PLACEHOLDER_IDS:
                call_id = None  # Mistral's SDK default id is the string "null"
        kind, held, member = spec(fragment)  # a function's, or a custom (freeform) tool's
        name = held.get("name") or None
        args = held.get(member)
        meta = None
        if len(fragment) > 2 or ("function" not in fragment and "custom" not in fragment):
            extras = {k: v for k, v in fragment.items() if k not in _KNOWN and v is not None}
            meta = extras or None
        if call_id is None and name is None and not args:
            if meta:  # a metadata-only delta (Gemini's thought_signature)
                self._meta_only(turn, raw_index, meta, out)
            return
        call = self._route(turn, raw_index, call_id, name, args)
        if call is None:
            return  # whitespace alone opens no call
        alias = self._aliases.get((turn, raw_index)) if self._aliases else None
        if alias is not None:
            call, call_id, name, args = self._through_alias(
                turn, raw_index, alias, call, (call_id, name, args)
            )
        parent_id = None
        if not call.parts and not call.is_object and call.id is None and call.name is None:
            pending = self._pending_meta.pop(turn, None)  # metadata that came before the call
            if pending:
                meta = {**pending, **(meta or {})}
            parent_id = parent if isinstance(parent, str) else None
        self._apply(
            call,
            turn=turn,
            call_id=call_id,
            name=name,
            args=args,
            meta=meta,
            parent_id=parent_id,
            out=out,
            kind=kind,
        )

    def _route(
        self, turn: int, raw_index: Any, call_id: str | None, name: str | None, args: Any
    ) -> _Call | None:
        calls = self._calls.setdefault(turn, [])
        if raw_index is None:  # Gemini's compatible endpoint, old Ollama: infer it
            current = calls[-1] if calls else None
        else:
            current = self._by_key.get((turn, raw_index))
            if current is None and call_id is not None:
                for earlier in self._by_id.get((turn, call_id), ()):
                    if self._same_call(earlier, name, args):
                        # LocalAI emits one call at several indexes: merge by id, until the
                        # text at this index departs from the call's (`_through_alias`).
                        self._by_key[(turn, raw_index)] = earlier
                        self._aliases[(turn, raw_index)] = _Alias(name)
                        return earlier
        if current is not None:
            alias = self._aliases.get((turn, raw_index)) if self._aliases else None
            if alias is not None and call_id in (None, current.id) and name in (None, current.name):
                return current  # its text decides (`_through_alias`)
            if not self._starts_new(current, call_id, name, args):
                return current
        if call_id is None and name is None and not _carries(args):
            return None  # whitespace before any call: JSON ignores it
        return self._open(turn, raw_index)

    def _open(self, turn: int, raw_index: Any) -> _Call:
        calls = self._calls.setdefault(turn, [])
        fresh = _Call(len(calls))
        calls.append(fresh)
        self._by_key[(turn, raw_index)] = fresh
        self._aliases.pop((turn, raw_index), None)
        return fresh

    def _through_alias(
        self,
        turn: int,
        raw_index: Any,
        alias: _Alias,
        call: _Call,
        fragment: tuple[str | None, str | None, Any],
    ) -> tuple[_Call, str | None, str | None, Any]:
        """A fragment at an index merged by id into `call`: the call it belongs to, and its
        id, name and arguments to apply there.

        LocalAI resends a call at another index, whole or in pieces: text that repeats
        `call`'s, from where this index left off, is dropped. Once `call`'s arguments are a
        whole object, text that departs from them is another call that reuses the id and the
        name (OpenRouter upstreams): it opens a call, with what this index resent before.
        """
        call_id, name, args = fragment
        alias.name = alias.name or name
        if name not in (None, call.name) or not call.complete():
            del self._aliases[(turn, raw_index)]  # not a resend: route as any index does
            return call, call_id, name, args
        if not _carries(args):
            return call, call_id, name, None
        if isinstance(args, str):
            text = call.text()
            if args == text or text.startswith(args, alias.at):
                alias.at = len(text) if args == text else alias.at + len(args)
                return call, call_id, name, None
            args = text[: alias.at] + args
        elif isinstance(args, dict) and json.loads(call.text()) == args:
            return call, call_id, name, None
        return self._open(turn, raw_index), call.id, alias.name, args

    @staticmethod
    def _cumulative(call: _Call, args: str) -> bool:
        """Whether `args`, which is longer than the text so far, resends it whole.

        A delta can begin with the text so far by chance (`{"a": ` then `{"a": 1}}`), so on
        first sight the reading under which the arguments parse wins; undecided, a
        cumulative server is the likelier source.
        """
        text = call.text()
        if not args.startswith(text):
            return False
        if call.cumulative:
            return True
        return not (_is_object(text + args) and not _is_object(args))

    @staticmethod
    def _same_call(call: _Call, name: str | None, args: Any) -> bool:
        """Whether a fragment with `call`'s id at another index is `call` again (LocalAI)
        rather than another call that reuses the id (OpenRouter upstreams)."""
        if name not in (None, call.name):
            return False
        if isinstance(args, dict):
            return call.is_object and json.loads(call.text()) == args
        return not _carries(args) or (isinstance(args, str) and call.text().startswith(args))

    @staticmethod
    def _resent(call: _Call, name: str | None, args: Any) -> bool:
        if not call.complete() or name not in (None, call.name):
            return False
        if isinstance(args, dict):
            return call.is_object and json.loads(call.text()) == args
        return isinstance(args, str) and args == call.text()

    def _starts_new(self, call: _Call, call_id: str | None, name: str | None, args: Any) -> bool:
        if call_id is not None and call.id is not None and call_id != call.id:
            # LM Studio sends a fresh id on every fragment of one call: only a name or a
            # finished object before it says this is another call (Ollama reuses index 0).
            return name is not None or (call.complete() and _carries(args))
        if name is not None and call.name and call.complete():
            if name != call.name:
                return True
            return _carries(args) and not self._resent(call, name, args)
        return False

    def _apply(
        self,
        call: _Call,
        *,
        turn: int,
        call_id: str | None,
        name: str | None,
        args: Any,
        meta: dict[str, Any] | None,
        parent_id: str | None,
        out: list[ToolChunk],
        kind: str | None = None,
    ) -> None:
        """Merge one fragment into `call` (§9 rules 3-5) and emit what changed."""
        before, call.kind = call.kind, settled(call.index, call.kind, bool(call.parts), kind)
        new_kind = CUSTOM if call.kind == CUSTOM and before != CUSTOM else None  # else default
        new_id = None
        if call_id is not None and call.id is None:
            call.id = new_id = call_id
            known = self._by_id.get((turn, call_id))
            self._by_id[(turn, call_id)] = (call,) if known is None else (known[0], call)
        new_name = None
        if name is not None and name != call.name:
            whole = not call.name or name.startswith(call.name)
            length = len(name) if whole else len(call.name or "") + len(name)
            if length > self.max_name_chars:
                raise ChunkSequenceError(
                    f"call {call.index}'s name grew to {length} characters, over "
                    f"max_name_chars={self.max_name_chars}; a tool's name is far shorter, so "
                    "the stream is broken or hostile. If it is genuine, give the adapter a "
                    "larger max_name_chars",
                    limit="max_name_chars",
                    maximum=self.max_name_chars,
                )
            call.name = name if whole else f"{call.name}{name}"  # a name streamed in fragments
            new_name = call.name
        delta: str | None = None
        snapshot: str | dict[str, Any] | None = None
        if call.kind == CUSTOM and args is not None:
            if not isinstance(args, str):
                raise ChunkSequenceError(
                    f"custom call {call.index}'s input is a {type(args).__name__}; a custom "
                    "(freeform) tool's input is text"
                )
            if args:  # freeform: as streamed, no resend read into it
                call.append(args)
                delta = args
        elif isinstance(args, dict):
            if value_too_deep(args, EVENT_DEPTH):  # json.dumps would raise RecursionError
                what = f"call {call.index}'s arguments are nested past {EVENT_DEPTH} levels"
                raise ChunkSequenceError(f"{what}: the stream is broken or hostile")
            call.is_object = True
            call.parts = [json.dumps(args)]
            snapshot = args
        elif args:
            if not isinstance(args, str):
                raise ChunkSequenceError(
                    f"tool call arguments are a {type(args).__name__}; expected text or an object"
                )
            length = call.length
            if len(args) > length > 0 and self._cumulative(call, args):
                snapshot = args  # cumulative server: the whole text so far, again
                call.replace(args)
                call.cumulative = True
            elif (
                len(args) <= length
                and (call.cumulative or (len(args) == length and call.complete()))
                and call.starts_with(args)
            ):  # only a cumulative server's text, or one as long as the whole, is looked at:
                # each delta's look (a join, a parse) made long arguments quadratic
                pass  # a resend of text already here (cumulative servers, LocalAI)
            else:
                call.append(args)
                delta = args
        if (
            new_id is None
            and new_name is None
            and delta is not None
            and not meta
            and not parent_id
            and new_kind is None
        ):
            out.append(ToolChunk(index=call.index, turn=turn, args_delta=delta))  # the hot path
        elif new_id or new_name or delta is not None or snapshot is not None or meta or new_kind:
            out.append(
                ToolChunk(
                    index=call.index,
                    turn=turn,
                    id=new_id,
                    name=new_name,
                    kind=new_kind,
                    args_delta=delta,
                    args_snapshot=snapshot,
                    meta=meta,
                    parent_id=parent_id,
                )
            )

    def _meta_only(
        self, turn: int, raw_index: Any, meta: dict[str, Any], out: list[ToolChunk]
    ) -> None:
        calls = self._calls.get(turn)
        call = self._by_key.get((turn, raw_index)) if raw_index is not None else None
        if call is None and calls:
            call = calls[-1]
        if call is None:
            self._pending_meta.setdefault(turn, {}).update(meta)
            return
        out.append(ToolChunk(index=call.index, turn=turn, meta=meta))
