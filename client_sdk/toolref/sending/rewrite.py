"""Rewriting outgoing messages: every complete invocation whose ref the server holds becomes
a `toolRef` marker (a pure function over the format layer)."""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from toolref import formats
from toolref.formats import Format, Pair
from toolref.wire.canonical import digest_of
from toolref.wire.models import FormatName


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Outgoing messages, and which refs stand in them."""

    messages: list[Any]
    format: FormatName | None
    used: dict[str, str]  # pair key -> ref sent as a marker
    refs: dict[str, str]  # pair key -> ref of every complete invocation, sent or not


def ref_of(pair: Pair) -> str:
    return str(digest_of(pair.invocation()).ref)


def rewrite(messages: list[Any], fmt: Format, usable: Container[str]) -> Rewrite:
    """Pure: `messages` with every complete invocation whose ref is `usable` made a marker."""
    if not isinstance(fmt, Format):
        raise TypeError(
            f"fmt is a toolref.formats.Format, not {fmt!r}: for a format name, "
            f"rewrite(messages, toolref.formats.get({fmt!r}), usable)"
        )
    if isinstance(usable, str):
        raise TypeError(
            f"usable is a collection of refs, not the str {usable!r} (`in` would match any "
            f"substring of it): usable={{{usable!r}}}"
        )
    if isinstance(usable, Collection) and not isinstance(usable, AbstractSet | Mapping):
        # A list (or `refs.values()`) answers `in` by reading it through: once per
        # invocation, quadratic. Read once into a set: linear in both.
        try:
            usable = frozenset(usable)
        except TypeError:
            kinds = sorted({type(ref).__name__ for ref in usable if not isinstance(ref, str)})
            raise TypeError(
                f"usable is a collection of refs (str), not of {', '.join(kinds)}: usable=set(refs)"
            ) from None
    found = formats.scan(messages, fmt)
    refs = {pair.key: ref_of(pair) for pair in found.complete}
    used = {key: ref for key, ref in refs.items() if ref in usable}
    return Rewrite(formats.replace(messages, found, used), fmt.name, used, refs)
