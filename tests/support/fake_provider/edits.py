"""A session by edits, as aider works: the model answers with whole-file listings the agent
writes to disk, the agent runs its test command after each edit and sends the failing
output back, and the model ends with a final text.

Stateless like `script.Script`: it counts the distinct markers of test runs in the
request's user messages (k of them) and answers edit k while k < `calls`, then the final
text. Edit k writes `step-kk.txt` (`edit_line(k)`); the test command (`TEST_SCRIPT`, which
the test writes as `check.sh` in the working directory) prints `marker(k)` computed by the
shell from the number of step files on disk, then the files, and exits 1 so the agent sends
its output back. aider stops after 3 such reflections: `calls` is at most 3 for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fake_provider.reading import text_of
from tests.support.fake_provider.script import FINAL_TEXT, step_file
from tests.support.fake_provider.wire import Api, Reply

TEST_SCRIPT = """\
n=$(ls step-*.txt | wc -l)
echo "e2e-out-$((999 + n))"
cat step-*.txt
exit 1
"""
_MARKER = re.compile(r"e2e-out-(\d{4})")


def edit_line(k: int) -> str:
    """What edit k writes (the model's text: the shell's marker is not in it)."""
    return f"e2e-edit-{k:02d}"


def run_markers(api: Api, body: dict[str, Any]) -> list[str]:
    """The markers of the test runs the request carries, distinct, in order (aider adds a
    run's output twice: to the chat, and as the message asking for a fix)."""
    messages = body.get("messages") if api in ("chat", "messages") else None
    seen: dict[str, None] = {}
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict) and message.get("role") == "user":
            seen |= dict.fromkeys(_MARKER.findall(text_of(message.get("content"))))
    return [f"e2e-out-{digits}" for digits in seen]


@dataclass(frozen=True, slots=True)
class EditScript:
    """`calls` edits, each checked by the agent's test command, then the final text."""

    calls: int

    def __call__(self, api: Api, body: dict[str, Any]) -> Reply:
        """The answer to a request (a `Model`)."""
        k = len(run_markers(api, body))
        if k >= self.calls:
            return Reply(text=f"{FINAL_TEXT} ({k} edits tested)", index=k)
        name = step_file(Path(), k).name
        listing = f"{name}\n```\n{edit_line(k)}\n```\n"
        return Reply(text=f"Writing {name}.\n\n{listing}", index=k, kind=f"edit:{name}")
