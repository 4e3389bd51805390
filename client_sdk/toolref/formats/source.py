"""A conversation as its sender wrote it: `replace` and `fill` applied to each message's
JSON text instead of its parsed value, so that every byte not part of a payload (key order,
number forms, escapes) reaches the receiver as it was sent.

`texts[i]` is the JSON text of message `i`; the `Scan` comes from the parsed messages. Each
message is walked once however many sites it holds (`spans.locate`), so the cost is linear
in the text. Pure functions: no I/O.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from toolref.formats.conversation import Pair, Scan
from toolref.formats.site import MARKER, ORDER, Site, from_marker_text, to_marker_text
from toolref.kit import spans


@dataclass(frozen=True, slots=True)
class Payload:
    """The JSON text of an invocation's arguments and result, as a message carried them."""

    args: str
    result: str


# An edit of one site: the object's text in, its new text out.
Change = Callable[[str, int], str]


def payloads(texts: Sequence[str], pairs: Sequence[Pair]) -> dict[str, Payload]:
    """The payload text of each complete pair, by pair key."""
    return _replaced(texts, pairs, {}, record=True)[1]


def replace(
    texts: Sequence[str], found: Scan, refs: Mapping[str, str]
) -> tuple[list[str], dict[str, Payload]]:
    """`conversation.replace` on texts: the complete pairs whose key is in `refs` made
    markers; also the payload text each of those pairs carried, by pair key."""
    chosen = [p for p in found.pairs if p.key in refs and p.complete]
    return _replaced(texts, chosen, refs, record=False)


def _replaced(
    texts: Sequence[str], pairs: Sequence[Pair], refs: Mapping[str, str], *, record: bool
) -> tuple[list[str], dict[str, Payload]]:
    changes: dict[int, dict[tuple[int | str, ...], Change]] = defaultdict(dict)
    cut: dict[str, dict[str, str]] = defaultdict(dict)  # pair key -> payload key -> text
    for pair in pairs:
        for site, _ in pair.sides:
            ref = refs.get(pair.key, "")

            def mark(
                text: str, at: int, site: Site = site, ref: str = ref, key: str = pair.key
            ) -> str:
                marker, taken = to_marker_text(text, at, site.payload_keys, ref)
                cut[key].update(zip(site.payload_keys, taken, strict=True))
                return marker

            changes[site.message][site.path[1:]] = mark
    out = _edited(texts, changes, keep=record)
    found: dict[str, Payload] = {}
    for pair in pairs:
        taken = cut[pair.key]
        call, result = pair.call, pair.result
        if call is not None and result is not None and call.args_key and result.result_key:
            found[pair.key] = Payload(taken[call.args_key], taken[result.result_key])
    return out, found


def fill(texts: Sequence[str], found: Scan, invocations: Mapping[str, Payload]) -> list[str]:
    """`conversation.fill` on texts: every marker whose ref is in `invocations` filled back
    with the payload texts held for that ref.

    A message whose markers can be told apart by their refs alone (each names another ref,
    none lists its own member order, the text holds no other `"toolRef":"tr_..."` member,
    and no escape in it could spell a marker's key or ref) has each marker's `toolRef`
    member replaced in place, found by one regular expression scan; any other message is
    walked (`spans.locate`), which reads keys and refs as a parser does."""
    wanted: dict[int, list[tuple[Site, str, dict[str, str]]]] = defaultdict(list)
    for pair in found.pairs:
        ref = pair.ref
        if ref is None or ref not in invocations:
            continue
        held = invocations[ref]
        for site, obj in pair.sides:
            if MARKER not in obj:
                continue
            values = {}
            if site.args_key is not None:
                values[site.args_key] = held.args
            if site.result_key is not None:
                values[site.result_key] = held.result
            wanted[site.message].append((site, ref, values))
    out = list(texts)
    changes: dict[int, dict[tuple[int | str, ...], Change]] = {}
    for index, sites in wanted.items():
        by_ref = {ref: values for _, ref, values in sites}
        filled = None
        if len(by_ref) == len(sites):  # no ref on two markers of the message
            filled = _filled_in_place(texts[index], by_ref)
        if filled is not None:
            out[index] = filled
            continue
        changes[index] = {site.path[1:]: _restorer(values) for site, _, values in sites}
    return _edited(out, changes, keep=False)


def _restorer(values: dict[str, str]) -> Change:
    def restore(text: str, at: int) -> str:
        return from_marker_text(text, at, values)

    return restore


_MARKER_MEMBER: Final = re.compile(r'"toolRef"\s*:\s*"(tr_[a-z2-7]{26})"')
# A `\u` escape of an ASCII letter, digit or underscore: a key or ref written with one
# (`"tool\u0052ef"`) is a marker's to a parser and invisible to `_MARKER_MEMBER`, which
# could then take a look-alike for it. No JSON writer escapes these on its own.
_WORD_ESCAPE: Final = re.compile(r"\\u00(?:3[0-9]|4[1-9a-fA-F]|5[0-9aAfF]|6[1-9a-fA-F]|7[0-9aA])")


@functools.lru_cache(maxsize=64)
def _key_text(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def _filled_in_place(text: str, by_ref: Mapping[str, Mapping[str, str]]) -> str | None:
    """`text` with the `toolRef` member of each marker replaced by its payload members, or
    None when the members found are not exactly the markers expected, or when a marker's
    key or ref may be written with escapes (the walk decides)."""
    if ORDER in text or _WORD_ESCAPE.search(text) is not None:
        return None
    found = list(_MARKER_MEMBER.finditer(text))
    if len(found) != len(by_ref) or {m.group(1) for m in found} != by_ref.keys():
        return None
    parts: list[str] = []
    at = 0
    for match in found:
        members = ",".join(
            _key_text(key) + ":" + value for key, value in by_ref[match.group(1)].items()
        )
        parts += (text[at : match.start()], members)
        at = match.end()
    parts.append(text[at:])
    return "".join(parts)


def _edited(
    texts: Sequence[str],
    changes: Mapping[int, Mapping[tuple[int | str, ...], Change]],
    *,
    keep: bool,
) -> list[str]:
    """`texts` with each message's changes applied (or, with `keep`, only run for what
    they record). Sites of one depth never overlap; a site inside another (a tool message
    that also carries calls) is edited first, so the outer change reads the edited text.
    One walk of the message per depth: at most a few."""
    out = list(texts)
    for index, by_path in changes.items():
        text = texts[index]
        if keep:
            located = spans.locate(text, 0, by_path)
            for path, change in by_path.items():
                change(text, located[path][0])
            continue
        for depth in sorted({len(path) for path in by_path}, reverse=True):
            level = {path: change for path, change in by_path.items() if len(path) == depth}
            located = spans.locate(text, 0, level)
            edits = [(*located[p], change(text, located[p][0])) for p, change in level.items()]
            text = spans.splice(text, edits)
        out[index] = text
    return out


def with_results(
    texts: Sequence[str],
    results: Sequence[tuple[Site, str]],
    beside: Sequence[Mapping[str, str]] = (),
) -> list[str]:
    """`conversation.with_results` on texts: at each result site (holding its result in
    full), the result member's value replaced by the given JSON text; `beside[i]` (when
    given): other members of the `i`th result's object, each present one's value replaced
    by the JSON text beside its key (Gemini's `functionResponse.parts` emptied with it)."""
    changes: dict[int, dict[tuple[int | str, ...], Change]] = defaultdict(dict)
    for n, (site, new) in enumerate(results):
        if site.result_key is None:
            continue
        others = beside[n] if n < len(beside) else {}

        def put(
            text: str,
            at: int,
            key: str = site.result_key,
            new: str = new,
            others: Mapping[str, str] = others,
        ) -> str:
            found, end = spans.members(text, at, wanted="")
            edits = [(found[key].start, found[key].end, new)]
            edits += [(found[k].start, found[k].end, v) for k, v in others.items() if k in found]
            return spans.splice(text, edits, at, end)

        changes[site.message][site.path[1:]] = put
    return _edited(texts, changes, keep=False)
