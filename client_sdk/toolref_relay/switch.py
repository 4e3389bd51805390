"""`Switchboard`: which upstream the relay sends to when it may switch between several,
and which conversations must be told they moved.

On a switch the gateway rewrites each request of the conversation for the new upstream (the
handoff in front, tool ids mapped, the old backend's opaque fields dropped); the relay's part
is to say, in `Toolref-Switched-From`, the upstream it came from and how many messages came
before the switch, on every request after it. A conversation is known by
its opening (system prompt and first message), which stays the same every turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from toolref.kit.lru import LRU
from toolref.wire.encoding import dumps_json

_REMEMBERED: Final = 4096  # conversations whose last upstream is kept (least recent dropped)


def conversation_of(body: Mapping[str, Any], key: str) -> str | None:
    """A name for the conversation `body` continues: a digest of its opening; None when it
    has no messages yet."""
    messages = body.get(key)
    if not isinstance(messages, list) or not messages:
        return None
    opening = [body.get("system"), body.get("instructions"), messages[0]]
    try:
        return hashlib.sha256(dumps_json(opening)).hexdigest()
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class Switchboard:
    """names: the upstreams to switch between (empty: no switching); the first is selected."""

    names: tuple[str, ...] = ()
    selected: str | None = None
    # conversation -> (upstream it last used, its Toolref-Switched-From value or None)
    _last: LRU[str, tuple[str, str | None]] = field(default_factory=lambda: LRU(_REMEMBERED))

    def __post_init__(self) -> None:
        if self.names and self.selected is None:
            self.selected = self.names[0]

    def route(self, name: str) -> str:
        """The upstream a request addressed to `name` goes to."""
        if self.selected is not None and name in self.names:
            return self.selected
        return name

    def select(self, name: str) -> str:
        """Select `name`; the upstream selected before."""
        if name not in self.names:
            known = ", ".join(self.names) or "none (start the relay with --switch a,b)"
            raise ValueError(f"cannot switch to {name!r}: the relay switches between {known}")
        previous, self.selected = self.selected, name
        return previous or name

    def cycle(self) -> str:
        """Select the next name (after the last, the first); the one now selected."""
        if not self.names:
            raise ValueError("nothing to switch between: start the relay with --switch a,b")
        at = self.names.index(self.selected) if self.selected in self.names else -1
        self.select(self.names[(at + 1) % len(self.names)])
        return self.names[(at + 1) % len(self.names)]

    def moved(self, conversation: str | None, upstream: str, count: int) -> str | None:
        """Note that `conversation` (`count` messages now) goes to `upstream`. The value of
        `Toolref-Switched-From` for it: `<previous upstream>; at=<messages from before the
        switch>` on this and every later request on the new upstream (the gateway rewrites
        each the same way, so the new upstream's prompt cache keeps hitting), else None."""
        if conversation is None or not self.names:
            return None
        before = self._last.get(conversation)
        if before is None or before[0] == upstream:
            found = before[1] if before is not None else None
        else:  # the newest message is the first the new upstream answers
            found = f"{before[0]}; at={max(0, count - 1)}"
        self._last.put(conversation, (upstream, found))
        return found
