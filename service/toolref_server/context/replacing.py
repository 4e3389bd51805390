"""A request's body with some tool results replaced, every other byte as the client wrote it.

What stands in for a result (`stand_in`) names the tool, shows how it was called and how
long its result was, says how to see it whole again (call the tool again), then gives its
summary. The same invocation and summary give the same bytes on every turn, so a result
once replaced keeps the provider's prompt cache warm from then on.

Each replaced result's message is written anew from its own text (`toolref.formats.source.
with_results`: only the result's value changes, and the media beside it, emptied: Gemini's
`functionResponse.parts`, `facts.BESIDE`) and remembered on its `Message`, so a turn
rewrites only the messages whose replacements are new; the body is then one join of the
client's bytes and those messages (C speed). Pure but for those memos.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from toolref.formats import FORMATS
from toolref.formats.source import with_results
from toolref.wire.encoding import LONE_SURROGATE, surrogates_escaped
from toolref_server.context.facts import Facts

ARGS_SHOWN: Final = 200  # characters of a call's arguments shown, at most
NAME_SHOWN: Final = 128  # characters of a tool's name shown, at most (providers allow 64)
SIZE_DIGITS: Final = 19  # of a result's size in bytes, at most: no body reaches 10**19
PINNED: Final = "stand-in:"  # a pinned stand-in's summarizer id: this, `<summarizer>:<chars>`
_WIDEST: Final = "\x00"  # JSON writes it in 6 characters (`\u0000`): none takes more


def stand_in(name: str, args: str, size: int, summary: str) -> str:
    """The text that stands in for a result of `size` bytes of tool `name` (shown up to
    `NAME_SHOWN` characters), called with `args` (JSON text, shown up to `ARGS_SHOWN`)."""
    tool = _shown(name, NAME_SHOWN) or "tool"
    return (
        f"[toolref: {size} bytes of this result cleared; call {tool}({_shown(args, ARGS_SHOWN)}) "
        f"again to see it whole. Summary:]\n{summary}"
    )


def _shown(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."


@functools.lru_cache(maxsize=64)
def longest_pinned(summary_chars: int) -> int:
    """The most characters a stand-in of a summary of `summary_chars` characters is kept in
    (pinned: the JSON text of `stand_in`'s text as a result, `as_json` of it or of a
    format's form of it): its name, arguments and summary each at their longest, of the
    character JSON writes longest, its size of `SIZE_DIGITS` digits. What `toolref-server
    cache import` holds a `PINNED` summary to. Linear in `summary_chars`."""
    text = stand_in(
        _WIDEST * NAME_SHOWN, _WIDEST * ARGS_SHOWN, 10**SIZE_DIGITS - 1, _WIDEST * summary_chars
    )
    return max(len(as_json(each.text_result(text))) for each in FORMATS.values())


def rewritten(facts: Facts, replaced: Mapping[int, Sequence[tuple[int, str]]]) -> bytes:
    """`facts.body` with, for each message index in `replaced`, each of its results (by
    index) given the JSON text beside it. One join of the body's slices and those messages
    at C speed, plus the messages whose replacements changed since the turn before."""
    body = facts.body
    pieces: list[bytes] = []
    at = 0
    for index in sorted(replaced):
        message = facts.messages[index]
        chosen = tuple(sorted(replaced[index]))
        done = message.rewritten  # read once: another thread may set it meanwhile
        if done is None or done[0] != chosen:
            sites = [(message.results[result].site, new) for result, new in chosen]
            beside = [dict.fromkeys(message.results[result].beside, "[]") for result, _ in chosen]
            (new_text,) = with_results([message.text], sites, beside)
            done = (chosen, new_text.encode("utf-8"))
            message.rewritten = done
        pieces += (body[at : message.bstart], done[1])
        at = message.bend
    pieces.append(body[at:])
    return b"".join(pieces)


def as_json(value: object) -> str:
    """A stand-in's value as JSON text: the same bytes for the same value, every turn; a
    lone surrogate (JSON carries `\\ud800`, UTF-8 has no form for it) as its escape, so
    the text encodes, is stored and is sent. Linear in the text."""
    return surrogates_escaped(json.dumps(value, ensure_ascii=False))


def escaped(value: Any) -> Any:
    """`value` with each lone surrogate in its strings (and keys) written out as the text of
    its escape (`"\\ud800"`, six characters): a value canonical JSON, and so a ref and a
    summary, can be had of. Linear in the value."""
    text = json.dumps(value, ensure_ascii=False)
    return json.loads(
        LONE_SURROGATE.sub(lambda found: "\\" + surrogates_escaped(found.group()), text)
    )
