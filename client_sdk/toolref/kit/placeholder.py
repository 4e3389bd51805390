"""The text that stands in for a summarized tool result (summary-mode hydrate).

It names the tool and the ref (so the full result can always be fetched) and is byte-stable:
the same invocation and summary give the same bytes every turn, which keeps provider prompt
caches warm::

    [toolref: summary of the read_file result; the full result is ref tr_x7k2m4qpeoaccwyd6n3h5ggwmu]
    read_file src/app.py: 5321 bytes, 120 lines
    ...
"""

from __future__ import annotations

import re
from typing import Final

_LINE: Final = "[toolref: summary of the {tool} result; the full result is ref {ref}]"
_PARSE: Final = re.compile(
    r"\A\[toolref: summary of the (?P<tool>.*?) result; the full result is ref "
    r"(?P<ref>tr_[a-z2-7]{26})\]\n",
    re.DOTALL,
)


def placeholder(tool: str, ref: str, summary: str) -> str:
    return _LINE.format(tool=tool, ref=ref) + "\n" + summary


def parse(text: str) -> tuple[str, str, str] | None:
    """(tool, ref, summary) of a placeholder; None for any other text."""
    match = _PARSE.match(text)
    if match is None:
        return None
    return match["tool"], match["ref"], text[match.end() :]
