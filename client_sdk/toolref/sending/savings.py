"""What a manager's requests cost on the wire, next to what full payloads would have cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolref.wire.encoding import dumps_json


@dataclass
class Savings:
    """What went over the wire, next to what full payloads would have cost."""

    requests: int = 0
    fallbacks: int = 0
    sent_bytes: int = 0
    full_bytes: int = 0
    refs_sent: int = 0
    histories_used: int = 0  # requests that sent only the messages after a history

    @property
    def ratio(self) -> float:
        return self.full_bytes / self.sent_bytes if self.sent_bytes else 1.0


def full_size(body: Mapping[str, Any], key: str, size: int | None) -> int:
    """`len(dumps_json(body))`, from the transcript's sizes when the turn has them: the JSON
    of a list is its items' joined by commas, in brackets."""
    messages = body[key]
    if size is None or type(body) is not dict:
        return len(dumps_json(body))
    return len(dumps_json({**body, key: []})) + size + max(len(messages) - 1, 0)
