"""examples/acp_agent.py, run as a user would: every line it prints is a conforming
JSON-RPC `session/update`, and each call lives its whole life on the wire."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.acp.conformance import check

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str) -> tuple[list[dict[str, Any]], str]:
    done = subprocess.run(
        [sys.executable, "examples/acp_agent.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    for line in lines:
        assert set(line) == {"jsonrpc", "method", "params"}
        assert line["jsonrpc"] == "2.0"
        assert line["method"] == "session/update"
        check(line["params"])
    return [line["params"]["update"] for line in lines], done.stderr


def size(updates: list[dict[str, Any]]) -> int:
    return sum(len(json.dumps(u, separators=(",", ":"))) for u in updates)


def replay(updates: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Apply the updates as a v1 client does (fields replace, collections too)."""
    calls: dict[str, dict[str, Any]] = {}
    for update in updates:
        fields = {k: v for k, v in update.items() if k not in ("sessionUpdate", "toolCallId")}
        if update["sessionUpdate"] == "tool_call":
            assert update["toolCallId"] not in calls, "tool_call sent twice"
            defaults = {"kind": "other", "status": "pending", "content": [], "locations": []}
            calls[update["toolCallId"]] = {**defaults, **fields}
        elif update["sessionUpdate"] == "tool_call_update":
            calls[update["toolCallId"]].update(fields)  # KeyError: update before tool_call
    return calls


@pytest.mark.parametrize("mode", [[], ["--full-objects"], ["--window", "10"]])
def test_the_agent_reports_each_call_from_start_to_result(mode: list[str]) -> None:
    updates, stderr = run(*mode)
    calls = replay(updates)
    read, todo = calls["toolu_read_0001"], calls["toolu_todo_0002"]
    assert read["status"] == "completed"
    assert read["kind"] == "read"
    assert read["title"].startswith("read_file: /")
    assert read["locations"][0]["path"].endswith("examples/acp_agent.py")
    assert "An ACP agent's tool loop" in read["content"][0]["content"]["text"]
    assert todo["status"] == "completed"
    assert todo["kind"] == "think"
    plans = [u for u in updates if u["sessionUpdate"] == "plan"]
    assert [e["status"] for e in plans[-1]["entries"]] == ["completed", "in_progress", "pending"]
    assert "notifications" in stderr


def test_minimal_updates_carry_less_than_full_objects() -> None:
    minimal, _ = run()
    full, _ = run("--full-objects")
    assert replay(minimal) == replay(full)
    assert size(minimal) < size(full)
    for n, update in enumerate(minimal):
        if update["sessionUpdate"] == "tool_call_update":
            before = replay(minimal[:n])[update["toolCallId"]]
            for field, value in update.items():
                if field not in ("sessionUpdate", "toolCallId"):
                    assert before.get(field) != value, f"{field} resent unchanged"
    for update in full:
        if update["sessionUpdate"] == "tool_call_update":
            assert {"title", "kind", "status", "content", "locations"} <= set(update)
