"""Every test stream in tests/fixtures/streams gives exactly its expected calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.streams.build import HERE, builders, render
from toolref.streaming import ToolBuffer, ToolCall, accumulate, adapter_for

FILES = sorted(HERE.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(path.read_text())
    return fixture


def check(calls: list[ToolCall], expected: list[dict[str, Any]]) -> None:
    assert len(calls) == len(expected), [(c.id, c.name, c.status) for c in calls]
    for call, want in zip(calls, expected, strict=True):
        for field, value in want.items():
            got = getattr(call, field)
            if field == "meta":
                assert {k: got.get(k) for k in value} == value
            else:
                assert got == value, (field, call)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_fixture_gives_its_expected_calls(path: Path) -> None:
    fixture = load(path)
    calls = accumulate(fixture["events"], fixture["provider"])
    check(calls, fixture["expected"])


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_fixture_events_match_the_streamed_calls(path: Path) -> None:
    """Fed chunk by chunk, completion events carry the same calls `close()` returns."""
    fixture = load(path)
    adapter = adapter_for(fixture["provider"])
    buffer = ToolBuffer(progress_interval=0)
    finished: dict[tuple[int, int], ToolCall] = {}
    for event in fixture["events"]:
        for chunk in adapter.feed(event):
            for happened in buffer.feed(chunk):
                call = getattr(happened, "call", None)
                if call is not None:
                    finished[(call.turn, call.index)] = call
    for chunk in adapter.end():
        for happened in buffer.feed(chunk):
            call = getattr(happened, "call", None)
            if call is not None:
                finished[(call.turn, call.index)] = call
    calls = buffer.close()
    assert [finished[(c.turn, c.index)].id for c in calls] == [c.id for c in calls]
    assert buffer.has_tool_calls is fixture["has_tool_calls"]


def test_fixture_files_are_what_their_builders_write() -> None:
    """The committed files are the dumped SDK models: regenerate with
    `python -m tests.fixtures.streams.build` after changing a builder."""
    built = builders()
    assert sorted(built) == [p.stem for p in FILES]
    for stem, build in built.items():
        assert (HERE / f"{stem}.json").read_text() == render(build()), stem
