"""What one edits version saves over another on the wire (issue 39), per turn: every shared
trace and edit pattern sent turn by turn through the relay's `Editor` (sans-I/O, every
recipe confirmed, each turn's answer the one the conversation's next turn writes back,
streamed as the bench's upstream streams it: `loadtests.scripted`), once written at each
version, every edit read back as the gateway reads it. Bodies only: heads and framing are
the same at both versions.

    python -m loadtests.version_bytes [OLD NEW]     (default: 7 8)
"""

from __future__ import annotations

import argparse
import sys

from loadtests import scripted, traces
from loadtests.edits_baseline import AGENT_HEADERS
from loadtests.edits_bench import from_trace
from loadtests.patterns import PATTERNS, Pattern, encode
from toolref.edits import wire
from toolref.edits.answer import AnswerTap
from toolref.sending.editor import Editor


def sent(pattern: Pattern, version: int) -> int:
    """The edit bytes of `pattern` written at `version`, each read back whole."""
    editor = Editor(version=version)
    headers = list(AGENT_HEADERS[pattern.fmt])
    held: dict[str, bytes] = {}  # the receiver's answers, by recipe
    total = 0
    for n, turn in enumerate(pattern.turns):
        edit = editor.prepare(headers, encode(turn.body), "messages")
        assert edit is not None
        total += len(edit.body)
        header, blob = wire.read(edit.body, 1 << 30, 1 << 30)
        answer = held.get(header.base or "") if header.answer is not None else None
        wire.inline(header, blob, b"", None, answer)
        editor.confirm(edit, edit.ref)
        found = scripted.next_answer(pattern.turns, n)
        if found is not None:
            tap = AnswerTap("anthropic" if pattern.fmt == "anthropic" else "openai-chat")
            made = tap.answer if tap.feed(scripted.stream(pattern.fmt, found)) else None
            editor.answered(edit.ref, made)
            if made is not None:
                held[edit.ref] = made
    return total


def main(old: int = 7, new: int = 8) -> int:
    chosen = [p for p in (from_trace(t, None) for t in traces.load()) if p is not None]
    chosen += [make(80, 0) for make in PATTERNS.values()]
    print(f"| conversation | turns | version {old}, B/turn | version {new}, B/turn | saved |")
    print("|---|---|---|---|---|")
    for pattern in chosen:
        turns = len(pattern.turns)
        before, after = sent(pattern, old) / turns, sent(pattern, new) / turns
        print(f"| {pattern.name} | {turns} | {before:.1f} | {after:.1f} | {before - after:.1f} |")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.version_bytes",
        description=(__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", type=int, nargs="?", default=7, help="the version before")
    parser.add_argument("new", type=int, nargs="?", default=8, help="the version after")
    found = parser.parse_args()
    sys.exit(main(found.old, found.new))
