"""The web-chat demo: bytes per turn the browser uploaded, with and without the JS SDK.

The demo conversation (examples/web-chat/test/conversation.mjs: 30 turns, two tool calls
of several KB most turns) runs twice in Debian's Chromium against the demo's backend and a
real registry on loopback: once with `?toolref=off` (plain `fetch`, what AI SDK 5's
`useChat` sends by default) and once with `toolrefFetch`. Bytes are read from the
browser's request events (playwright-core `postDataBuffer`): what each request put on the
wire, a resend included, not what the SDK says it sent.

    python -m loadtests.web_chat   # this section only, replaced in docs/benchmarks.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from examples import web_chat_demo

from loadtests import chart
from loadtests.report import Section

TURNS = 30
SHOWN = (1, 2, 5, 10, 15, 20, 25, 30)
DOCS = Path(__file__).resolve().parents[1] / "docs"
TITLE = "Web chat (browser)"


def _per_turn(record: dict[str, Any]) -> list[int]:
    wire = [0] * TURNS
    for request in record["requests"]:
        wire[request["turn"] - 1] += request["wireBytes"]
    return wire


def _conversation(query: str) -> list[int]:
    with tempfile.TemporaryDirectory(prefix="web-chat-bench-") as scratch:
        with web_chat_demo.Stack(Path(scratch) / "data", delay=0.0) as stack:
            record = web_chat_demo.drive(stack.url, Path(scratch) / "run.json", TURNS, query=query)
        if len(record["turns"]) != TURNS or any(t["error"] for t in record["turns"]):
            raise RuntimeError(f"the demo conversation failed ({query or 'toolref on'})")
        return _per_turn(record)


def run() -> Section:
    lacking = web_chat_demo.missing()
    if lacking:
        raise RuntimeError(f"the web-chat bench needs a browser: {lacking}")
    plain, sdk = _conversation("?toolref=off"), _conversation("")
    rows = [
        [str(n), f"{plain[n - 1]:,}", f"{sdk[n - 1]:,}", f"{plain[n - 1] / sdk[n - 1]:.1f}"]
        for n in SHOWN
    ]
    total_plain, total_sdk = sum(plain), sum(sdk)
    rows.append(
        [f"all {TURNS}", f"{total_plain:,}", f"{total_sdk:,}", f"{total_plain / total_sdk:.1f}"]
    )
    intro = (
        f"The demo conversation of `make demo` ({TURNS} turns, examples/web-chat/test/"
        "conversation.mjs), recorded from the browser: Debian's Chromium, headless, driven by "
        "playwright-core, against examples/web_chat_backend.py behind `ToolRefMiddleware` and "
        "a registry on the embedded engine, all on loopback. Bytes are what each request to "
        "/api/chat put on the wire (`postDataBuffer`, resends included), without the SDK "
        "(`?toolref=off`: AI SDK 5's `useChat` with plain `fetch`) and with `toolrefFetch` "
        "(the first turn as it is, every later one an edit of the one the backend kept, each "
        "new segment compressed alone). Command: `make bench`, or `python -m "
        "loadtests.web_chat` for this section alone."
    )
    return Section(
        TITLE,
        intro,
        ["turn", "bytes without the SDK", "bytes with the SDK", "fewer (x)"],
        rows,
        figures={"ratio": total_plain / total_sdk},
        verdicts=[
            f"{total_plain / total_sdk:.1f}x fewer bytes uploaded over the {TURNS} turns with "
            "the SDK. Each turn is an edit of the request the backend kept the turn before, so "
            "it uploads only the new user message and the previous answer: that answer's tool "
            "results (made by the backend, so new to it) go once, each compressed alone (gzip "
            "in a browser); the rest is ranges of what the backend holds.",
        ],
    )


def replace_section(path: Path, section: Section) -> None:
    """Put the section in place of the one of the same title (or at the end)."""
    text = path.read_text()
    heading = f"## {section.title}\n"
    before, found, rest = text.partition(heading)
    after = rest[rest.find("\n## ") + 1 :] if found and "\n## " in rest else ""
    if not found:  # before the hand-kept hostile-loadtest region, as `make bench` puts it
        before, marker, kept = text.partition("<!-- hostile-loadtest -->")
        after = marker + kept
    path.write_text(before + section.markdown() + ("\n" + after if after else ""))


def main() -> int:
    section = run()
    drawn = chart.draw(section, DOCS / "bench")
    if drawn is not None:
        section.chart = str(drawn.relative_to(DOCS))
    replace_section(DOCS / "benchmarks.md", section)
    print(section.markdown())
    return 0


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "web_chat")
    sys.exit(main())
