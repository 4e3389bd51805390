"""The provider's own count of a request's input tokens, read from its answer as it passes
(sans-I/O: fed the answer's bytes, asked at the end): Anthropic's `usage` (input, cache
read, cache written), OpenAI Chat's and Responses' (prompt or input tokens, cached), Gemini's
`usageMetadata` (prompt, cached), in a JSON answer or in a stream's events.

Bounded: a JSON answer is kept up to `limit` bytes to be read at its end (a larger one is
not read); a stream is read line by line, only the `data:` lines that name a usage parsed,
a line longer than `limit` skipped. Linear in the answer, however small its pieces: each
byte is searched for a line end once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

LIMIT: Final = 1 << 20  # bytes of a JSON answer, or of one event line, read at most
_NAMES: Final = (b'"usage"', b'"usageMetadata"')


@dataclass(frozen=True, slots=True)
class Usage:
    """Input tokens as the provider counted them: all of them, those read from its prompt
    cache, and those written to it."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def merged(self, other: Usage) -> Usage:
        """The larger of each count (a stream repeats or completes them event by event)."""
        return Usage(
            max(self.input, other.input),
            max(self.cache_read, other.cache_read),
            max(self.cache_write, other.cache_write),
        )


class UsageReader:
    """Feed it an answer's body pieces (`feed`), then read `usage` (None: none found)."""

    def __init__(self, content_type: str, limit: int = LIMIT, *, encoded: bool = False) -> None:
        self.stream = content_type.split(";", maxsplit=1)[0].strip().lower() == "text/event-stream"
        self.limit = limit
        self.encoded = encoded  # a compressed answer (Content-Encoding): not read
        self._held = bytearray()
        self._skipping = False  # within an event line longer than the limit
        self._searched = 0  # bytes of `_held` known to hold no line end
        self._found: Usage | None = None

    def feed(self, data: bytes) -> None:
        if self.encoded:
            return
        if not self.stream:
            if len(self._held) <= self.limit:
                self._held += data[: self.limit + 1 - len(self._held)]
            return
        self._held += data
        while True:
            end = self._held.find(b"\n", self._searched)  # only what was not searched yet
            if end < 0:
                if len(self._held) > self.limit:
                    self._held.clear()
                    self._skipping = True
                self._searched = len(self._held)
                return
            line = bytes(self._held[:end])
            del self._held[: end + 1]
            self._searched = 0
            if self._skipping or len(line) > self.limit:
                self._skipping = False
                continue
            if line.startswith(b"data:") and any(name in line for name in _NAMES):
                self._read(line[5:])

    @property
    def usage(self) -> Usage | None:
        """What was found, once the answer is whole (a last event line with no line end
        read too)."""
        if self._held and len(self._held) <= self.limit and not self._skipping:
            if not self.stream:
                self._read(bytes(self._held))
            elif self._held.startswith(b"data:"):
                self._read(bytes(self._held[5:]))
            self._held.clear()
            self._searched = 0
        return self._found

    def _read(self, text: bytes) -> None:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # nested past the parser: no usage read
            return
        found = usage_in(value)
        if found is not None:
            self._found = found if self._found is None else self._found.merged(found)


def usage_in(value: Any, depth: int = 0) -> Usage | None:
    """The usage an answer or event holds (at most 3 objects deep: Responses' events nest it
    in `response`, Anthropic's `message_start` in `message`)."""
    if not isinstance(value, dict) or depth > 3:
        return None
    gemini = value.get("usageMetadata")
    if isinstance(gemini, dict):
        prompt = _count(gemini.get("promptTokenCount"))
        return Usage(prompt, _count(gemini.get("cachedContentTokenCount")))
    usage = value.get("usage")
    if isinstance(usage, dict):
        return _usage(usage)
    for inner in value.values():
        if isinstance(inner, dict):
            found = usage_in(inner, depth + 1)
            if found is not None:
                return found
    return None


def _usage(usage: dict[str, Any]) -> Usage | None:
    if "prompt_tokens" in usage:  # OpenAI Chat: cached tokens are part of the prompt's
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return Usage(_count(usage["prompt_tokens"]), cached)
    if "input_tokens" not in usage:
        return None
    details = usage.get("input_tokens_details")
    if isinstance(details, dict):  # Responses: cached tokens are part of the input's
        return Usage(_count(usage["input_tokens"]), _count(details.get("cached_tokens")))
    read = _count(usage.get("cache_read_input_tokens"))  # Anthropic: apart from the input
    written = _count(usage.get("cache_creation_input_tokens"))
    return Usage(_count(usage["input_tokens"]) + read + written, read, written)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
