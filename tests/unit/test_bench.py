"""The benchmark code runs and reports what it measured (timings themselves are not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests import (
    acp_updates,
    bandwidth,
    chart,
    hashing,
    preparation,
    report,
    rewriting,
    streams,
    turn_costs,
    wire_limit,
)
from loadtests.patterns import PATTERNS
from loadtests.timing import Timing, measure
from loadtests.traces import Trace, load

from toolref.edits import wire


def small_trace() -> Trace:
    messages = []
    for n in range(5):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}\n" * 50})
    return Trace("synthetic", messages)


def test_rewriting_section_reports_every_operation(tmp_path: Path) -> None:
    section = rewriting.run([small_trace()], rounds=1, min_time=0.001)
    assert [row[0] for row in section.rows] == [
        "json.dumps",
        "replace",
        "replace + digests",
        "fill",
    ]
    assert section.rows[0][2] == "1.000"
    assert set(section.figures) == {"replace", "replace + digests", "fill"}
    assert all(value > 0 for value in section.figures.values())
    out = tmp_path / "benchmarks.md"
    text = report.write(out, "make bench", [section])
    assert out.read_text() == text
    assert "| replace |" in text
    assert "`make bench`" in text


def test_timing_ratio() -> None:
    fast = measure(lambda: None, repeats=3, min_time=0.001)
    assert fast.seconds > 0
    assert Timing(2.0).ratio(Timing(4.0)) == 0.5


def test_missing_trace_folder_loads_nothing(tmp_path: Path) -> None:
    assert load(tmp_path / "absent") == []


def test_summarization_section_compares_summary_mode_with_dropping(tmp_path: Path) -> None:
    from loadtests import summarization

    section = summarization.run([small_trace()])
    [row] = section.rows
    measured = summarization.measure(small_trace())
    assert measured["older"] == 2  # 5 results, the last 3 kept
    assert measured["drop"] < measured["summary"] < measured["full"]
    assert row[0] == "synthetic"
    assert row[5] == f"{measured['summarized']} of 2"
    doc = tmp_path / "summaries.md"
    doc.write_text("intro\n<!-- t -->\nold\n<!-- /t -->\nend\n")
    report.replace_region(doc, "t", "new\n")
    assert doc.read_text() == "intro\n<!-- t -->\nnew\n<!-- /t -->\nend\n"


def test_handoff_section_and_example() -> None:
    from loadtests import handoffs

    section = handoffs.run([small_trace()])
    [row] = section.rows
    assert row[:5] == ["synthetic", "5", "1", "4", "0"]  # `ls` five times: the last kept
    example = handoffs.example(small_trace(), lines=5)
    assert "**Before**" in example
    assert "[CONTEXT FROM PREVIOUS SESSION]" in example


def test_streaming_section_compares_the_buffer_with_decoding() -> None:
    section = streams.run(rounds=1, min_time=0.001)
    assert [row[0] for row in section.rows] == ["openai_chat", "anthropic"]
    assert all(row[1] == "10,000" for row in section.rows)
    assert set(section.figures) == {"openai_chat", "anthropic"}
    assert all(value > 0 for value in section.figures.values())
    assert len(section.verdicts) == 2


def test_streaming_bench_streams_have_10000_chunks_and_8_calls() -> None:
    for provider, build in streams.STREAMS.items():
        payloads = build()
        assert len(payloads) == streams.CHUNKS
        events = [json.loads(p) for p in payloads]
        assert streams.consume(provider, events) == streams.CALLS


def test_acp_section_meets_the_byte_budgets() -> None:
    section = acp_updates.run()
    assert section.figures["status_only_bytes"] <= 90
    assert section.figures["status_saving"] >= 0.85
    assert section.rows[1][1] == "20"
    assert section.figures["run_saving"] > 0.5


def test_bandwidth_sends_a_payload_in_full_once_then_as_a_ref() -> None:
    raw, with_refs = bandwidth.requests(small_trace())
    assert len(raw) == len(with_refs) == 4  # one request per model call after the first
    assert with_refs[0] == raw[0]  # nothing was sent before: all in full
    assert all(len(r) < len(b) for r, b in zip(with_refs[1:], raw[1:], strict=True))
    assert b"output 0" in raw[-1]
    assert b"output 0" not in with_refs[-1]
    upload = bandwidth.measure(small_trace())
    assert upload.sizes["refs"] < upload.sizes["raw"]
    assert upload.sizes["zstd"] < upload.sizes["raw"]


def test_edit_uploads_send_each_message_about_once() -> None:
    """One edit per model call: the first holds everything, each later one keeps what the
    one before held and carries only what is new (a turn's result and the next call)."""
    trace = small_trace()
    bodies = bandwidth.edit_uploads(trace)
    raw, _ = bandwidth.requests(trace)
    assert len(bodies) == len(raw) == 4
    for body in bodies[1:]:
        header = wire.described(body)
        assert header["v"] == wire.WRITTEN  # the newest bytes (7: the shipped dictionary)
        assert header["b"].startswith("tb_")
        assert any(isinstance(op, list) for op in header["o"])  # the previous request kept
        assert len(body) < len(raw[-1])
    # against the conversation (no size guard) the new text compresses with what came before
    for unguarded in bandwidth.edit_uploads(trace, guarded=False)[1:]:
        assert len(unguarded) < len(raw[-1]) / 2
    upload = bandwidth.measure(trace)
    assert upload.sizes[bandwidth.EDITS_ROW] == sum(map(len, bodies))
    assert upload.sizes[bandwidth.EDITS_ROW] < upload.sizes["raw"] / 2
    # (a trace this small and repetitive compresses whole about as well: the comparison
    # with zstd is the benchmark's, over the shared traces). Against the conversation, zstd
    # does better than zstd alone; brotli alone (version 5, the default) may beat both.
    zstd_alone = sum(map(len, bandwidth.edit_uploads(trace, version=4)))
    assert upload.sizes[bandwidth.OPEN_ROW] <= zstd_alone
    assert upload.sizes[bandwidth.EDITS_ROW] <= zstd_alone
    assert upload.messages == len(trace.messages)


def test_bandwidth_drops_what_only_the_recorder_kept() -> None:
    message = {"role": "assistant", "content": "x", "extra": {"cost": 1}, "tool_calls": None}
    assert bandwidth.on_the_wire(message, "openai-chat") == {"role": "assistant", "content": "x"}


def test_hashing_section_compares_with_raw_sha256() -> None:
    section = hashing.run([small_trace()], rounds=1, min_time=0.001)
    assert [row[0] for row in section.rows] == ["sha256", "json.dumps + sha256", "canonical digest"]
    assert 0 < section.figures["share"] < 1


def test_each_section_gets_a_png_chart_of_its_main_column(tmp_path: Path) -> None:
    section = report.Section(
        title="Some Section",
        intro="",
        header=["name", "size", "note"],
        rows=[["a", "1,200", "x"], ["b", "300", "y"]],
    )
    path = chart.draw(section, tmp_path)
    assert path == tmp_path / "some-section.png"
    assert path.read_bytes().startswith(b"\x89PNG")
    empty = report.Section(title="t", intro="", header=["name"], rows=[["a"]])
    assert chart.draw(empty, tmp_path) is None


def test_preparation_section_times_guarded_and_unguarded_editors() -> None:
    section = preparation.run([small_trace()], rounds=1)
    assert [row[0] for row in section.rows] == list(preparation.MODES)
    assert set(section.figures) == {"size-guarded_growth", "unguarded_growth"}
    assert all(value > 0 for value in section.figures.values())


def test_turn_costs_measure_both_ends_in_each_mode() -> None:
    """The issue-39 section: per conversation, the sender's and the receiver's CPU per turn
    with neither, the long window, and both; the answer makes the edits smaller."""
    pattern = PATTERNS["one-mark"](12, 0)
    plain = turn_costs.measure(pattern, False, False)
    both = turn_costs.measure(pattern, True, True)
    assert plain.sender > 0
    assert plain.receiver > 0
    assert both.sent < plain.sent  # the assistant messages go against their answers
    section = turn_costs.run([], turns=6)
    assert len(section.rows) == len(PATTERNS)
    assert all(len(row) == len(section.header) for row in section.rows)
    assert section.figures["worst sender ratio"] > 0


def test_the_wire_s_limit_models_the_last_turns_of_the_longest_trace() -> None:
    section = wire_limit.run([small_trace()])
    assert [row[0] for row in section.rows] == ["first judged", "median", "last"]
    assert section.figures["break-even"] > 0
    assert section.figures["faster"] > 0
    assert "model" in section.verdicts[0]


def test_every_bench_module_says_what_it_does_on_help_and_starts_no_run() -> None:
    """`python -m loadtests.<module> --help` prints its usage and exits 0 for every module
    that runs (`__main__`): fourteen of them started their run instead (minutes of work)."""
    import subprocess
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "loadtests"
    runnable = sorted(p.stem for p in folder.glob("*.py") if "__main__" in p.read_text())
    assert len(runnable) > 20
    for module in runnable:
        done = subprocess.run(
            [sys.executable, "-m", f"loadtests.{module}", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=folder.parent,
            check=False,
        )
        assert done.returncode == 0, (module, done.stderr[-500:])
        assert module in done.stdout + done.stderr, module
