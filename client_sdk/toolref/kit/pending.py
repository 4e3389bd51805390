"""`Pending`: tool calls waiting for their result, and which one a result answers: the one
pairing rule of the SDK (`formats.conversation.scan`) and the gateway's context editing
(`context_edits`), written once.

A result answers the oldest call of its id not yet answered; a result whose id no call
has, the oldest such call of its tool's name that has no id; a result with no id, the
oldest unanswered call of its name. Each call is answered once: a second result for it
gets none. O(1) amortized a call and a result, however they are ordered.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """See the module docstring; `T` is whatever stands for a call."""

    def __init__(self) -> None:
        self._by_id: dict[str, deque[T]] = defaultdict(deque)
        self._by_name: dict[str | None, deque[T]] = defaultdict(deque)
        self._idless_by_name: dict[str | None, deque[T]] = defaultdict(deque)
        self._taken: set[int] = set()

    def add(self, call: T, call_id: str | None, name: str | None) -> None:
        """`call` (its id and its tool's name) waits for its result."""
        self._by_name[name].append(call)
        if call_id is None:
            self._idless_by_name[name].append(call)
        else:
            self._by_id[call_id].append(call)

    def answered_by(self, call_id: str | None, name: str | None) -> T | None:
        """The call a result of `call_id` and `name` answers, taken; None when none waits."""
        if call_id is not None:
            found = self._take(self._by_id.get(call_id))
            return found if found is not None else self._take(self._idless_by_name.get(name))
        return self._take(self._by_name.get(name))

    def _take(self, queue: deque[T] | None) -> T | None:
        while queue:
            call = queue.popleft()
            if id(call) not in self._taken:  # taken through another index: skipped
                self._taken.add(id(call))
                return call
        return None
