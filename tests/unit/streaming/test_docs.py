"""docs/streaming.md names real tests and every stream fixture."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "streaming.md").read_text()
TESTS = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))


def _region(name: str) -> str:
    return DOC.split(f"<!-- {name} -->", 1)[1].split(f"<!-- /{name} -->", 1)[0]


def test_every_quirk_row_names_a_test_that_exists() -> None:
    rows = [line for line in _region("quirk-table").splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 16  # the rows of the notes' §1.5 table
    for row in rows:
        name = re.findall(r"`(test_\w+)`", row)
        assert len(name) == 1, row
        assert re.search(rf"^def {name[0]}\(", TESTS, re.MULTILINE), name[0]


def test_every_fixture_file_is_listed() -> None:
    files = sorted(p.stem for p in (ROOT / "tests" / "fixtures" / "streams").glob("*.json"))
    listed = re.findall(r"^\| \d\d \| `(\w+)` \|", _region("fixture-list"), re.MULTILINE)
    assert listed == files
    assert len(files) == 28


def test_the_usage_examples_run() -> None:
    """The snippets run against a real stream, with the names they leave open supplied."""
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.DOTALL)
    assert len(blocks) == 2
    stream = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "."}'},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
        {"type": "message_stop"},
    ]
    first: dict[str, object] = {"stream": stream}
    exec(compile(blocks[0], "docs/streaming.md", "exec"), first)
    assert [call.arguments for call in first["runnable"]] == [{"path": "."}]  # type: ignore[attr-defined]
    shown: list[object] = []
    second: dict[str, object] = {
        "stream": [_as_chat(event) for event in _CHAT],
        "show": lambda name, value: shown.append((name, value)),
        "log": lambda call_id, status: shown.append((call_id, str(status))),
    }
    exec(compile(blocks[1], "docs/streaming.md", "exec"), second)
    assert ("call_1", "complete") in shown
    # Throttled to one progress event here: the partial object as it stood then.
    assert ("read", {}) in shown


_CHAT = [
    ({"index": 0, "id": "call_1", "function": {"name": "read", "arguments": '{"path": '}}, None),
    ({"index": 0, "function": {"arguments": '"a"}'}}, None),
    (None, "tool_calls"),
]


def _as_chat(event: tuple[dict[str, object] | None, str | None]) -> dict[str, object]:
    call, finish = event
    delta = {"tool_calls": [call]} if call else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
