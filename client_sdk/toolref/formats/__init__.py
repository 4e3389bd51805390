"""Message formats: find the tool invocations in a message list, swap payloads for refs and back.

One module per format; each yields the `Site`s of its messages and says how strongly a
message looks like it (`claim`). `detect` picks the format of a conversation; `scan`,
`replace` and `fill` (from `conversation`) do the rest, the same way for every format.
All of it is pure: no I/O, and input messages are never modified.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from toolref.formats import ai_sdk_v4, ai_sdk_v5, anthropic, gemini, openai_chat, openai_responses
from toolref.formats.conversation import Pair, Scan, fill, replace, with_results
from toolref.formats.conversation import scan as scan_sites
from toolref.formats.evidence import DISTINCTIVE, FOREIGN
from toolref.formats.site import MARKER, ORDER, Site
from toolref.wire.errors import ValidationError
from toolref.wire.models import FormatName


def _as_is(text: str) -> Any:
    return text


@dataclass(frozen=True, slots=True)
class Format:
    name: FormatName
    claim: Callable[[Any], int]
    sites: Callable[[Sequence[Any]], Iterator[Site]]
    # How a text (a summary) stands in for a result: most formats take a string.
    text_result: Callable[[str], Any] = _as_is


# Order breaks ties between formats a conversation fits equally well (plain text messages).
FORMATS: Final[dict[FormatName, Format]] = {
    module.NAME: Format(
        module.NAME, module.claim, module.sites, getattr(module, "text_result", _as_is)
    )
    for module in (openai_chat, anthropic, openai_responses, ai_sdk_v5, ai_sdk_v4, gemini)
}
NAMES: Final = tuple(FORMATS)


def is_format_name(name: object) -> TypeGuard[FormatName]:
    """True when `name` is one of `NAMES`."""
    return isinstance(name, str) and name in FORMATS


def check_format(name: object) -> FormatName:
    """`name` as a `FormatName`, or `ValidationError` (a `ValueError`) listing the valid
    names: for names that come from configuration, or from callers without a type checker."""
    if is_format_name(name):
        return name
    valid = ", ".join(NAMES)
    if not isinstance(name, str):
        what = f"a format name is a str, not a {type(name).__name__} ({name!r})"
    else:
        close = difflib.get_close_matches(name, NAMES, n=1)
        what = f"unknown format {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    raise ValidationError(
        f"{what}; use one of {valid}, or omit `format` to have it detected",
        formats=list(NAMES),
    )


def get(name: FormatName) -> Format:
    """The format called `name`; `ValidationError` (a `ValueError`) for any other name."""
    return FORMATS[check_format(name)]


def check_messages(messages: Any) -> list[Any]:
    if not isinstance(messages, list):
        raise ValidationError(
            f"`messages` is a {type(messages).__name__}; send a list of message objects"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValidationError(
                f"message {index} is a {type(message).__name__}; every message is an object",
                message=index,
            )
    return messages


def detect(messages: Sequence[Any], name: FormatName | None = None) -> Format:
    """The format of `messages` (`name` when given), or 422 naming the message that breaks it.

    An unknown `name` is an `ValidationError` (a `ValueError`), whatever the messages."""
    return detection(messages, name).best()


@dataclass(frozen=True, slots=True)
class Detection:
    """Where `detect` stands after some messages: the formats they all fit, in `FORMATS`
    order, each with how many of them looked distinctively like it. A fold: detecting a
    conversation continued from a stored `Detection` is detecting it whole."""

    scores: dict[FormatName, int]
    count: int = 0  # messages seen

    def best(self) -> Format:
        formats = [FORMATS[name] for name in self.scores]
        return max(formats, key=lambda f: self.scores[f.name])  # max keeps the first of equals

    def fits(self, name: FormatName) -> bool:
        return name in self.scores


def detection(
    messages: Sequence[Any], name: FormatName | None = None, before: Detection | None = None
) -> Detection:
    """`detect`'s state after `messages`, continuing `before` (the messages ahead of them);
    422 naming the message (counted from the first of `before`) that fits no candidate."""
    if before is None:
        candidates = [get(name)] if name is not None else list(FORMATS.values())
        score = dict.fromkeys((f.name for f in candidates), 0)
        offset = 0
    else:
        kept = [n for n in before.scores if name is None or n == name]
        if name is not None:
            get(name)  # an unknown name is refused whatever the history fits
        if not kept:
            raise ValidationError(
                f"the {before.count} messages before message {before.count} are not {name}. "
                "A conversation is in one format: convert it, or name the right `format`",
                message=before.count,
            )
        candidates = [FORMATS[n] for n in kept]
        score = {n: before.scores[n] for n in kept}
        offset = before.count
    for index, message in enumerate(messages):
        claims = {f.name: f.claim(message) for f in candidates}
        fitting = [f for f in candidates if claims[f.name] != FOREIGN]
        if not fitting:
            raise _mixed(offset + index, message, candidates, score)
        candidates = fitting
        for f in candidates:
            score[f.name] += claims[f.name] == DISTINCTIVE
    return Detection({f.name: score[f.name] for f in candidates}, offset + len(messages))


def _mixed(
    index: int, message: Any, before: list[Format], score: dict[FormatName, int]
) -> ValidationError:
    looks = [f.name for f in FORMATS.values() if f.claim(message) == DISTINCTIVE]
    looks = looks or [f.name for f in FORMATS.values() if f.claim(message) != FOREIGN]
    earlier = ", ".join(f.name for f in before)
    if len(before) == 1 and index == 0:
        what = f"message 0 is not {earlier}"
    else:
        what = f"message {index} does not fit the format of the messages before it ({earlier})"
    it = f"; it looks like {' or '.join(looks)}" if looks else ""
    return ValidationError(
        f"{what}{it}. A conversation is in one format: convert it, or name the right `format`",
        message=index,
    )


def scan(messages: Sequence[Any], fmt: Format) -> Scan:
    return scan_sites(messages, fmt.sites(messages))


__all__ = [
    "FORMATS",
    "MARKER",
    "NAMES",
    "ORDER",
    "Detection",
    "Format",
    "FormatName",
    "Pair",
    "Scan",
    "Site",
    "check_format",
    "check_messages",
    "detect",
    "detection",
    "fill",
    "get",
    "is_format_name",
    "replace",
    "scan",
    "with_results",
]
