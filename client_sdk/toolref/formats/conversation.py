"""Tool invocations of a conversation: pairing calls with results, replacing, filling.

Pure functions over the `Site`s a format yields. `scan` pairs each result with the oldest
unanswered call of the same id (ids do repeat in real traces: a provider may reuse an id
for a later call), or, where a format has no ids, with the oldest unanswered call of the
same tool name. `replace` turns complete invocations into markers, `fill` turns markers back.
A result no pending call answers (an orphan, or a second result for an answered call) is
left as it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolref.formats.site import (
    MARKER,
    ORDER,
    Change,
    Path,
    Site,
    from_marker,
    get_at,
    to_marker,
    update_all,
)
from toolref.kit.pending import Pending
from toolref.wire.canonical import Ref, is_ref
from toolref.wire.errors import InvalidRefError, ValidationError


@dataclass(slots=True)
class Pair:
    """A call and its result; either may be missing (pending call, orphan result)."""

    key: str  # the toolReferences key: the call id, made unique (`id#2`) when reused
    call: Site | None = None
    result: Site | None = None
    call_obj: dict[str, Any] | None = None
    result_obj: dict[str, Any] | None = None

    @property
    def sides(self) -> list[tuple[Site, dict[str, Any]]]:
        found = []
        if self.call is not None and self.call_obj is not None:
            found.append((self.call, self.call_obj))
        if (
            self.result is not None
            and self.result_obj is not None
            and self.result_obj is not self.call_obj
        ):
            found.append((self.result, self.result_obj))
        return found

    @property
    def ref(self) -> str | None:
        """The ref a marker on either side carries (both sides agree, `scan` checks)."""
        for _, obj in self.sides:
            if MARKER in obj:
                value: str = obj[MARKER]
                return value
        return None

    @property
    def complete(self) -> bool:
        """Both payloads present in full: an invocation that can be replaced by a ref. An
        object that already has a `toolRefOrder` member of its own is never replaced: its
        marker could not hold both that member and the order list."""
        if self.call is None or self.result is None or self.ref is not None:
            return False
        if any(ORDER in obj for _, obj in self.sides):
            return False
        return self.call.args_key is not None and self.result.result_key is not None

    @property
    def name(self) -> str:
        for site in (self.call, self.result):
            if site is not None and site.name is not None:
                return site.name
        return ""

    def invocation(self) -> dict[str, Any]:
        """The invocation of a complete pair, in wire form."""
        call, result = self.call, self.result
        if (
            call is None
            or result is None
            or call.args_key is None
            or result.result_key is None
            or self.call_obj is None
            or self.result_obj is None
            or self.ref is not None
        ):
            raise ValueError(f"tool call {self.key!r} has no complete invocation")
        return {
            "name": self.name,
            "args": self.call_obj[call.args_key],
            "result": self.result_obj[result.result_key],
            "isError": result.is_error,
        }


@dataclass(slots=True)
class Scan:
    """Every tool invocation found in a message list, in order of first appearance."""

    pairs: list[Pair] = field(default_factory=list)

    @property
    def complete(self) -> list[Pair]:
        return [p for p in self.pairs if p.complete]

    @property
    def marked(self) -> list[Pair]:
        return [p for p in self.pairs if p.ref is not None]

    @property
    def refs(self) -> list[str]:
        return list(dict.fromkeys(r for p in self.pairs if (r := p.ref) is not None))


def scan(messages: Sequence[Any], sites: Iterable[Site]) -> Scan:
    """Pair the sites of `messages`, checking that markers are refs."""
    found = Scan()
    pending: Pending[Pair] = Pending()  # calls without a result yet, oldest first
    uses: dict[str, int] = defaultdict(int)
    keys: set[str] = set()
    for site in sites:
        obj = get_at(messages, site.path)
        _check_marker(obj, site)
        if site.args_key is not None:
            pair = Pair(key=_key(site, uses, keys), call=site, call_obj=obj)
            if site.result_key is not None:
                pair.result, pair.result_obj = site, obj
            else:
                pending.add(pair, site.call_id, site.name)
            found.pairs.append(pair)
        elif site.result_key is not None or site.bare:
            call = pending.answered_by(site.call_id, site.name)
            if call is not None:
                call.result, call.result_obj = site, obj
                _check_same_ref(call)
            else:
                # No call waits for it (none had its id, or a second result for an answered
                # call, which some clients send): it travels as it is, as the app would take it.
                found.pairs.append(Pair(key=_key(site, uses, keys), result=site, result_obj=obj))
    return found


def _key(site: Site, uses: dict[str, int], keys: set[str]) -> str:
    base = site.call_id if site.call_id is not None else f"{site.name}@{_dotted(site.path)}"
    uses[base] += 1
    key = base if uses[base] == 1 else f"{base}#{uses[base]}"
    while key in keys:
        uses[base] += 1
        key = f"{base}#{uses[base]}"
    keys.add(key)
    return key


def _dotted(path: tuple[int | str, ...]) -> str:
    return ".".join(str(step) for step in path)


def _check_marker(obj: dict[str, Any], site: Site) -> None:
    if MARKER not in obj:
        return
    order = obj.get(ORDER)
    if ORDER in obj and not (
        isinstance(order, list)
        and all(isinstance(k, str) for k in order)
        and len(set(order)) == len(order)
    ):
        raise ValidationError(
            f"the toolRef marker at message {site.message} ({_dotted(site.path)}) has a "
            f"{ORDER} that is not a list of distinct member names; send markers as optimize "
            "made them",
            message=site.message,
        )
    beside = [key for key in site.payload_keys if key in obj]
    if beside:
        raise ValidationError(
            f"the toolRef marker at message {site.message} ({_dotted(site.path)}) also "
            f"carries {beside[0]!r}, the payload it stands for (filled, it would be there "
            "twice); send the marker without it, or the payload in full without the marker",
            message=site.message,
        )
    value = obj[MARKER]
    if not is_ref(value):
        try:
            Ref.parse(value)
        except InvalidRefError as exc:
            raise InvalidRefError(
                f"the toolRef marker at message {site.message} ({_dotted(site.path)}): "
                f"{exc.detail}",
                message=site.message,
            ) from None


def _check_same_ref(pair: Pair) -> None:
    refs = {obj[MARKER] for _, obj in pair.sides if MARKER in obj}
    if len(refs) > 1:
        raise ValidationError(
            f"tool call {pair.key!r} carries different refs on its call and its result "
            f"({', '.join(sorted(refs))}); both sides carry the ref of the same invocation",
        )


def replace(messages: Sequence[Any], found: Scan, refs: Mapping[str, str]) -> list[Any]:
    """Copy of `messages` with the complete pairs whose key is in `refs` made markers."""
    changes: dict[Path, Change] = {}
    for pair in found.pairs:
        ref = refs.get(pair.key)
        if ref is None or not pair.complete:
            continue
        for site, _ in pair.sides:

            def mark(obj: dict[str, Any], site: Site = site, ref: str = ref) -> dict[str, Any]:
                return to_marker(obj, site.payload_keys, ref)

            changes[site.path] = mark
    return update_all(messages, changes)


def fill(
    messages: Sequence[Any], found: Scan, invocations: Mapping[str, Mapping[str, Any]]
) -> list[Any]:
    """Copy of `messages` with every marker whose ref is in `invocations` filled back."""
    changes: dict[Path, Change] = {}
    for pair in found.pairs:
        ref = pair.ref
        if ref is None or ref not in invocations:
            continue
        invocation = invocations[ref]
        for site, obj in pair.sides:
            if MARKER not in obj:
                continue
            values = {}
            if site.args_key is not None:
                values[site.args_key] = invocation["args"]
            if site.result_key is not None:
                values[site.result_key] = invocation["result"]

            def restore(marker: dict[str, Any], values: dict[str, Any] = values) -> dict[str, Any]:
                return from_marker(marker, values)

            changes[site.path] = restore
    return update_all(messages, changes)


def with_results(messages: Sequence[Any], found: Scan, results: Mapping[str, Any]) -> list[Any]:
    """Copy of `messages` with the result payload of each pair in `results` (by key) replaced.

    Only full (not marker) result sides change; a pair that holds call and result in one
    object keeps its arguments.
    """
    changes: dict[Path, Change] = {}
    for pair in found.pairs:
        if pair.key not in results or pair.result is None or pair.result_obj is None:
            continue
        site, obj = pair.result, pair.result_obj
        if MARKER in obj or site.result_key is None:
            continue

        def put(
            target: dict[str, Any], key: str = site.result_key, value: Any = results[pair.key]
        ) -> dict[str, Any]:
            return {k: (value if k == key else v) for k, v in target.items()}

        changes[site.path] = put
    return update_all(messages, changes)
