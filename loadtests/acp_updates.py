"""ACP tool-call updates: bytes of minimal updates against full-object updates."""

from __future__ import annotations

from loadtests.report import Section
from toolref.acp import ToolCallTracker, location, text_content
from toolref.wire.encoding import dumps_json

CALL_ID = "call_12345678"  # 13 characters, as the done-when measures


def status_only() -> tuple[int, int]:
    """(status-only update, full-object update) bytes for a call with a 2 KB content item."""
    sizes = []
    for full in (False, True):
        tracker = ToolCallTracker("sess_bench", full_objects=full)
        tracker.start(CALL_ID, "Read src/app.py", kind="read", content=[text_content("x" * 2048)])
        (note,) = tracker.update(CALL_ID).status("in_progress").send()
        sizes.append(len(dumps_json(note["update"])))
    return sizes[0], sizes[1]


def edit_run(full_objects: bool) -> ToolCallTracker:
    """A realistic 20-update life of one edit call: the edit's 2 KB of input, its diff,
    progress reported in the title while checks run, the result, completion."""
    path = "/work/project/src/app.py"
    old = "".join(f"    value_{n} = compute({n})\n" for n in range(36))
    new = old.replace("compute(", "compute_cached(")
    tracker = ToolCallTracker("sess_bench", full_objects=full_objects)
    tracker.start(
        CALL_ID,
        "Edit src/app.py",
        kind="edit",
        raw_input={"file_path": path, "old_string": old, "new_string": new},
        locations=[location(path)],
    )
    tracker.update(CALL_ID).status("in_progress").send()
    tracker.update(CALL_ID).diff(path, new, old).send()
    for step in range(1, 15):
        tracker.update(CALL_ID).title(f"Edit src/app.py (checking {step}/14)").send()
    tracker.update(CALL_ID).set_locations([location(path, 12)]).send()
    tracker.update(CALL_ID).text("36 lines changed; checks pass").send()
    tracker.update(CALL_ID).raw_output({"ok": True, "linesChanged": 36}).send()
    tracker.update(CALL_ID).status("completed").send()
    return tracker


def run() -> Section:
    minimal_status, full_status = status_only()
    status_saving = 1 - minimal_status / full_status
    minimal, full = edit_run(False), edit_run(True)
    run_saving = 1 - minimal.bytes_sent / full.bytes_sent
    rows = [
        [
            "status-only update, 2 KB content item",
            "1",
            f"{minimal_status:,}",
            f"{full_status:,}",
            f"{status_saving:.1%}",
        ],
        [
            "edit call, 20 updates",
            str(minimal.notifications - 1),
            f"{minimal.bytes_sent:,}",
            f"{full.bytes_sent:,}",
            f"{run_saving:.1%}",
        ],
    ]
    return Section(
        title="ACP tool-call updates",
        intro=(
            "Compact JSON bytes of the `update` objects a `ToolCallTracker` sends, minimal (only "
            "changed fields) against compatibility mode (every update the whole call), for one "
            "status change of a call holding a 2 KB content item, and for the 20 updates of a "
            "realistic edit call (2 KB of input, a diff, progress in the title while checks "
            "run, the result, completion; the `tool_call` itself included in both totals)."
        ),
        header=["run", "updates", "minimal bytes", "full-object bytes", "saved"],
        rows=rows,
        figures={
            "status_only_bytes": minimal_status,
            "status_saving": status_saving,
            "run_saving": run_saving,
        },
        verdicts=[
            f"a status-only update is {minimal_status} bytes (budget 90) and "
            f"{status_saving:.1%} smaller than the full object (budget 85%)",
            f"over the 20-update edit call, minimal updates send {run_saving:.1%} fewer bytes",
        ],
    )


def life(full_objects: bool) -> str:
    """The notifications of one `bash` call's life, as JSON lines (shown in docs/acp.md)."""
    lines: list[str] = []
    tracker = ToolCallTracker(
        "sess_1",
        full_objects=full_objects,
        sink=lambda note: lines.append(dumps_json(note["update"]).decode()),
    )
    tracker.start(
        "call_8d1e2f3a", "bash", kind="execute", raw_input={"command": "pytest -q tests/unit"}
    )
    tracker.update("call_8d1e2f3a").title("bash: pytest -q tests/unit").send()
    tracker.update("call_8d1e2f3a").status("in_progress").text("collected 48 items").send()
    tracker.update("call_8d1e2f3a").set_content([text_content("48 passed in 1.9s")]).send()
    tracker.update("call_8d1e2f3a").status("in_progress").send()  # nothing changed: dropped
    tracker.update("call_8d1e2f3a").raw_output({"exitCode": 0}).status("completed").send()
    return "```json\n" + "\n".join(lines) + "\n```\n"
