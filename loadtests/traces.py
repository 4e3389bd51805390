"""The shared recorded conversations, for benchmarks and load tests (never copied here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


@dataclass(frozen=True, slots=True)
class Trace:
    name: str
    messages: list[dict[str, Any]]

    @property
    def size(self) -> int:
        return len(json.dumps(self.messages, separators=(",", ":"), ensure_ascii=False).encode())


def load(folder: Path = TRACES) -> list[Trace]:
    """Every conversation in the traces folder; empty when the folder is absent."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        conversations = data.get("conversations", [data])
        for n, conversation in enumerate(conversations):
            suffix = f"[{n}]" if len(conversations) > 1 else ""
            found.append(Trace(path.stem.rsplit(".", 1)[0] + suffix, conversation["messages"]))
    return found
