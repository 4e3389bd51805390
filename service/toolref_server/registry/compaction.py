"""Summary mode: results older than the last `keepRecent` become summary placeholders.

Pure functions; the route fetches the summaries and hands them in. A result is replaced only
when its placeholder (which names the tool and the ref, then gives the summary) is shorter
than the result itself, so summary mode never makes a result longer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from toolref import formats
from toolref.formats import Format, Pair, Scan, source
from toolref.formats.replaceable import direct, textual
from toolref.kit.placeholder import placeholder
from toolref.wire.encoding import dumps_json


@dataclass(frozen=True, slots=True)
class Candidate:
    pair: Pair
    ref: str
    invocation: dict[str, Any]


def older_results(
    found: Scan,
    refs: Mapping[str, str],
    keep_recent: int,
    exclude_tools: Collection[str],
    marked: Mapping[str, Callable[[], dict[str, Any]]] | None = None,
) -> list[Candidate]:
    """Answered invocations whose results are older than the last `keep_recent` results,
    excluding the tools named and the results no text may stand in for
    (`toolref.formats.replaceable`, context editing's rule: a server tool's typed result,
    a `tool_result` holding `tool_reference` blocks, a Responses output whose `output`
    keeps its shape, the result of a call code made; they still count among the recent
    ones), in result order: complete ones, and markers whose ref is in `marked` (which
    gives the invocation of each)."""
    held = marked or {}

    def invocation(pair: Pair) -> dict[str, Any]:
        return pair.invocation() if pair.complete else held[str(pair.ref)]()

    answered = sorted(
        (p for p in found.pairs if p.key in refs and _answered(p, held)),
        key=lambda p: _position(p.result.path) if p.result is not None else (),
    )
    older = answered[: max(0, len(answered) - keep_recent)]
    excluded = frozenset(exclude_tools)  # a set: a list looked up per pair was quadratic
    chosen = []
    for pair in older:
        if pair.name in excluded or not direct(pair.call_obj):
            continue
        whole = invocation(pair)  # a marker's result: its held invocation's
        if textual(pair.result_obj, whole["result"]):
            chosen.append(Candidate(pair, refs[pair.key], whole))
    return chosen


def _answered(pair: Pair, marked: Mapping[str, object]) -> bool:
    if pair.complete:
        return True
    both = pair.call is not None and pair.result is not None
    return both and pair.ref is not None and pair.ref in marked


def _position(path: tuple[int | str, ...]) -> tuple[tuple[int, int | str], ...]:
    """Document order: indexes compare as numbers (block 10 after block 2)."""
    return tuple((0, step) if isinstance(step, int) else (1, step) for step in path)


def replacements(fmt: Format, candidates: list[Candidate], summaries: list[str]) -> dict[str, Any]:
    """Pair key -> the placeholder result, for every result its placeholder makes shorter."""
    chosen: dict[str, Any] = {}
    for candidate, summary in zip(candidates, summaries, strict=True):
        value = fmt.text_result(placeholder(candidate.pair.name, candidate.ref, summary))
        if len(dumps_json(value)) < len(dumps_json(candidate.invocation["result"])):
            chosen[candidate.pair.key] = value
    return chosen


def apply(messages: list[Any], found: Scan, chosen: Mapping[str, Any]) -> list[Any]:
    return formats.with_results(messages, found, chosen)


def apply_text(texts: list[str], found: Scan, chosen: Mapping[str, Any]) -> list[str]:
    """`apply` on the messages' texts: only the replaced results are written anew."""
    return source.with_results(
        texts,
        [
            (pair.result, dumps_json(chosen[pair.key]).decode())
            for pair in found.pairs
            if pair.key in chosen and pair.result is not None
        ],
    )
