"""Gemini `streamGenerateContent` responses: whole function-call parts, and Vertex's
streamed partial arguments (`streamFunctionCallArguments`).

Whole calls stay open until their turn finishes, because the thought signature they must
carry back may arrive in a later, empty part. Gemini sends no per-call close and sometimes
no terminal chunk, so the end of the stream closes whatever is open normally.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolref.streaming.adapters.base import StreamAdapter, as_int, pick
from toolref.streaming.chunk import (
    ABORTED,
    FILTERED,
    MALFORMED,
    TRUNCATED,
    ArgPatch,
    PathPart,
    ToolChunk,
)
from toolref.wire.errors import ChunkSequenceError
from toolref.wire.numbers import describe, whole_number

_MALFORMED = {
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
}
_FILTERED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
_STEP = re.compile(
    r"\.([A-Za-z_$][\w$-]*)|\[([0-9]+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]"
)


_NAME = re.compile(r"[A-Za-z_$][\w$-]*")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code.startswith("u") and len(code) == 5:
        return chr(int(code[1:], 16))
    return _ESCAPES.get(code, code)  # \\ \' \" \/ stand for themselves


def json_path(text: str) -> tuple[PathPart, ...]:
    """The steps of an RFC 9535 normalized path such as `$.recipe.items[0]['a b']`."""
    if not text.startswith("$"):
        raise ChunkSequenceError(f"jsonPath {text!r} does not start at the root '$'")
    steps: list[PathPart] = []
    at = 1
    while at < len(text):
        match = _STEP.match(text, at)
        if match is None:
            raise ChunkSequenceError(
                f"cannot read jsonPath {text!r} at character {at}; expected .name, [n] or ['name']"
            )
        name, number, single, double = match.groups()
        if number is not None:
            position = whole_number(number)
            if position is None:
                raise ChunkSequenceError(
                    f"jsonPath {describe(text)} has an index of {len(number)} digits at "
                    f"character {at}; an array index has at most 18"
                )
            steps.append(position)
        else:
            quoted = single if single is not None else double
            steps.append(name if quoted is None else _ESCAPE.sub(_unescape, quoted))
        at = match.end()
    return tuple(steps)


def _written(path: tuple[PathPart, ...]) -> str:
    """A path as a normalized jsonPath again (`$.a[0]['b c']`), to name it in an error."""
    out = "$"
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        elif _NAME.fullmatch(step):
            out += f".{step}"
        else:
            out += "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return out


def _leaf(partial: Mapping[str, Any]) -> Any:
    for camel, snake in (("stringValue", "string_value"), ("numberValue", "number_value")):
        value = pick(partial, camel, snake)
        if value is not None:
            return value
    value = pick(partial, "boolValue", "bool_value")
    if value is not None:
        return bool(value)
    return None  # nullValue, or nothing at all


class _Turn:
    __slots__ = ("calls", "continuing", "open", "signed")

    def __init__(self) -> None:
        self.calls = 0
        self.open: int | None = None  # the Vertex call whose partial args are streaming
        self.continuing: set[tuple[PathPart, ...]] = set()
        self.signed = False


class GeminiAdapter(StreamAdapter):
    provider = "gemini"

    def __init__(self) -> None:
        super().__init__()
        self._state: dict[int, _Turn] = {}
        self._parent: str | None = None

    def _chunks(self, event: Mapping[str, Any] | None) -> list[ToolChunk]:
        if event is None:
            return []
        error = event.get("error")
        if error:
            message = error.get("message") if isinstance(error, Mapping) else error
            return self._fail_all(f"Gemini sent an error mid-stream: {message}")
        self._parent = pick(event, "responseId", "response_id") or self._parent
        out: list[ToolChunk] = []
        candidates = event.get("candidates")
        if not candidates:
            self._foreign(event)  # another provider's stream: say so, not "no calls"
        for candidate in candidates or ():
            turn = as_int(candidate.get("index", 0), "candidate index")
            state = self._state.setdefault(turn, _Turn())
            for part in (candidate.get("content") or {}).get("parts") or ():
                self._part(turn, state, part, out)
            reason = pick(candidate, "finishReason", "finish_reason")
            if reason:
                self._turns.add(turn)
                out.append(self._close(turn, reason, candidate))
        return out

    def end(self) -> list[ToolChunk]:
        # No terminal chunk is a known Vertex quirk, not a failure: close what is open. But a
        # Vertex call whose partial argument said more of its string would come was cut
        # mid-string (the quirk's last chunk carries whole values): that call is incomplete.
        out: list[ToolChunk] = []
        for turn in sorted(self._turns - self._finished):
            state = self._state.get(turn)
            if state is not None and state.open is not None and state.continuing:
                paths = ", ".join(sorted(_written(path) for path in state.continuing)[:3])
                out.append(
                    ToolChunk(
                        index=state.open,
                        turn=turn,
                        error=f"the gemini stream ended mid-string: the partial argument at "
                        f"{paths} said more would come (willContinue) and none did",
                        error_type=ABORTED,
                    )
                )
            out.append(self._finish(turn, None))
        return out

    def _close(self, turn: int, reason: str, candidate: Mapping[str, Any]) -> ToolChunk:
        message = pick(candidate, "finishMessage", "finish_message")
        if reason in _MALFORMED:
            detail = f"Gemini finished with {reason}" + (f": {message}" if message else "")
            return self._finish(turn, reason, detail, MALFORMED)
        if reason == "MAX_TOKENS":
            return self._finish(turn, reason, "MAX_TOKENS cut the response short", TRUNCATED)
        if reason in _FILTERED:
            return self._finish(turn, reason, f"Gemini stopped with {reason}", FILTERED)
        return self._finish(turn, reason)

    def _part(self, turn: int, state: _Turn, part: Mapping[str, Any], out: list[ToolChunk]) -> None:
        call = pick(part, "functionCall", "function_call")
        signature = pick(part, "thoughtSignature", "thought_signature")
        meta = {"thought_signature": signature} if signature else None
        if call is None:
            if meta and not part.get("text") and state.calls:
                # A signature in a later empty part: it belongs to the first call of the set
                # (only that one is signed) unless that one already has it.
                out.append(
                    ToolChunk(
                        index=0 if not state.signed else state.calls - 1, turn=turn, meta=meta
                    )
                )
                state.signed = True
            return
        self._turns.add(turn)
        name = call.get("name")
        will_continue = pick(call, "willContinue", "will_continue") is True
        if name:  # a new call: no string of the last one goes on (before this part's own)
            state.continuing.clear()
        patches = self._patches(state, pick(call, "partialArgs", "partial_args"))
        if name:
            index = state.calls
            state.calls += 1
            state.signed = state.signed or bool(meta)
            state.open = index if will_continue else None
            args = call.get("args")
            out.append(
                ToolChunk(
                    index=index,
                    turn=turn,
                    id=call.get("id"),
                    name=name,
                    args_snapshot=args if args is not None or patches else {},
                    args_patch=patches,
                    meta=meta,
                    parent_id=self._parent,
                )
            )
            return
        if state.open is None:
            if call or patches:
                raise ChunkSequenceError(
                    "a Gemini functionCall part without a name continues no open call; "
                    "only Vertex streamed arguments continue a call"
                )
            return
        index = state.open
        if not will_continue:  # an empty functionCall, willContinue false, or the array bug
            state.open = None
        out.append(
            ToolChunk(index=index, turn=turn, args_patch=patches, meta=meta, done=not will_continue)
        )

    @staticmethod
    def _patches(state: _Turn, partials: Any) -> tuple[ArgPatch, ...] | None:
        if not partials:
            return None
        patches = []
        for partial in partials:
            path = json_path(pick(partial, "jsonPath", "json_path") or "$")
            value = _leaf(partial)
            patches.append(
                ArgPatch(path, value, append=path in state.continuing and isinstance(value, str))
            )
            if pick(partial, "willContinue", "will_continue") is True:
                state.continuing.add(path)
            else:
                state.continuing.discard(path)
        return tuple(patches)
