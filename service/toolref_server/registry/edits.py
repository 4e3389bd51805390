"""Applying an edit (`application/vnd.toolref.edit`): the request it stands for, kept as a
new recipe.

The steps, each a function below, in order: read the edit (`toolref.edits.wire.read`); its
base (`Recipes.load`: the cache, else the node and its snapshot); the bytes of the base's
pieces and of the pieces it names (`Recipes.pieces`: one batched read); the dictionary its
inline bytes were compressed against; the inline segments; the new entries
(`toolref.edits.edit.apply`); every segment of the new recipe; the request restored
(`toolref.edits.request.restore`); then the recipe kept (`Recipes.keep`). Every refusal
comes before anything is stored: a base not held (409 `missing-history`), pieces named and
not held (409 `missing-pieces`, every one at once), inline bytes against another dictionary
(400 `dictionary-mismatch`), an edit that does not fit its base or a first segment that is
not headers (400), a request past the inflated limit (413).

Cost: linear in the edit and the new bytes, but for what a request is made of (the
entries' list, O(17 B) each, copied and digested once; the body joined once, a copy) and,
on a worker that holds neither the base nor its pieces, the base read once. Inflating,
digests and the join run in a worker thread when large (`Workers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from toolref.edits import wire
from toolref.edits.edit import (
    EditError,
    Inline,
    Keep,
    Named,
    Op,
    apply,
    dictionary,
    dictionary_order,
    needed,
)
from toolref.edits.recipe import PIECE_MIN, Entry, is_piece, literal_of, piece_of, piece_ref
from toolref.edits.request import Restored, restore
from toolref.receiving.budget import Account
from toolref.wire.errors import (
    BadRequestError,
    DecompressedTooLargeError,
    MissingHistoryError,
    MissingPiecesError,
)
from toolref_server.services import Services
from toolref_server.storage.recipes import Held, piece_id

_GAP: Final = Inline(b"")  # an inline op before its bytes are read (dictionary_order)


@dataclass(frozen=True, slots=True)
class Applied:
    """An edit applied: the recipe kept (`ref`), the request it stands for, and the sizes
    of the body (`raw`) and of the edit as sent (`wire`)."""

    ref: str
    request: Restored
    raw: int
    wire: int


class _Lacking(Exception):
    """A base piece the dictionary reaches into is not held."""


async def apply_edit(
    services: Services,
    tenant: str,
    data: bytes,
    secrets: Sequence[tuple[str, str]],
    account: Account,
) -> Applied:
    """The request the edit in `data` stands for (credentials from `secrets`), its recipe
    kept for `tenant`; see the module docstring. Bytes kept are charged to `account`."""
    settings, recipes, workers = services.settings, services.recipes, services.workers
    limit = settings.max_decompressed_bytes
    header, blob = wire.read(data, max_inline=limit)  # O(header): ops and lengths
    services.rate.admit(tenant)
    base = await _base(services, tenant, header.base)  # cache, else <= 2 GETs
    named = [op.piece for op in header.ops if isinstance(op, Named)]
    wanted = [*(piece_of(e) for e in base.entries if is_piece(e)), *named] if base else named
    held = await recipes.pieces(tenant, wanted)  # cache, else one batched read
    words = _dictionary(base, header, held)  # O(z)
    account.charge(len(words))
    inline = await workers.run(header.inline, wire.inline, header, blob, words, account)
    ops = _ops(header.ops, inline)
    entries = _applied(base, ops)  # O(entries): slices of the base's
    carried = {piece_id(s): s for s in inline if len(s) >= PIECE_MIN}  # O(inline)
    segments = _segments(base, entries, frozenset(named), carried, held)  # O(entries)
    raw = sum(map(len, segments)) - len(segments[0])
    if raw > limit:
        raise DecompressedTooLargeError(
            f"the edit stands for a body of {raw} bytes, over the limit of {limit} "
            "(TOOLREF_MAX_DECOMPRESSED_BYTES); send a smaller request",
            limit=limit,
        )
    account.charge(raw)  # before the join
    request = await workers.run(raw, restore, segments, secrets)  # O(body): one join
    if request is None:
        raise BadRequestError(
            "the edit's first segment is not the request's headers with a line for each "
            "credential sent alongside (toolref.edits.segments.header_segment); send every "
            "credential it names (x-api-key, authorization, ...) as a real header, or the "
            "request whole"
        )
    named_held = [p for p in named if p not in carried]
    ref = await recipes.keep(tenant, entries, ops, base=base, pieces=carried, named=named_held)
    return Applied(ref, request, raw, len(data))


async def _base(services: Services, tenant: str, ref: str | None) -> Held | None:
    """The base the edit names (None: none); `MissingHistoryError` when it is not held."""
    if ref is None:
        return None
    held = await services.recipes.load(tenant, ref)
    if held is None:
        raise MissingHistoryError(
            f"the edit's base {ref} is not held (never kept for this API key, expired or "
            "evicted); send the edit again with no base (`b` null), its segments inline or "
            "named",
            ref,
        )
    return held


def _dictionary(base: Held | None, header: wire.Header, held: dict[bytes, bytes]) -> bytes:
    """The last `z` bytes of the base's segments in dictionary order (b"" for none);
    `MissingHistoryError` when a segment they reach into is not held. O(ops + z)."""
    size = header.dictionary or 0
    if not size or base is None:
        return b""
    entries = base.entries

    def segment(index: int) -> bytes:
        entry = entries[index]
        if not is_piece(entry):
            return literal_of(entry)
        found = held.get(piece_of(entry))
        if found is None:
            raise _Lacking(piece_of(entry))
        return found

    ops: list[Op] = [_GAP if type(op) is int else op for op in header.ops]  # type: ignore[misc]
    order = dictionary_order(len(entries), ops)
    try:
        for index in needed(order, lambda i: len(segment(i)), size):
            segment(index)
    except _Lacking as lacking:
        raise MissingHistoryError(
            f"the edit's base {base.ref} is not held whole (its piece "
            f"{piece_ref(lacking.args[0])} is gone); send the edit again with no base",
            base.ref,
        ) from None
    return dictionary(order, segment, size)


def _ops(listed: Sequence[Keep | Named | int], inline: Sequence[bytes]) -> list[Op]:
    """The header's ops with their inline segments in place of their lengths. O(ops)."""
    segments = iter(inline)
    return [Inline(next(segments)) if type(op) is int else op for op in listed]  # type: ignore[misc]


def _applied(base: Held | None, ops: Sequence[Op]) -> list[Entry]:
    try:
        return apply(base.entries if base is not None else [], ops)
    except EditError as exc:
        raise BadRequestError(
            f"{exc}; compute the edit against the base it names (toolref.edits.edit.diff), "
            "or send the request whole"
        ) from None


def _segments(
    base: Held | None,
    entries: Sequence[Entry],
    named: frozenset[bytes],
    carried: dict[bytes, bytes],
    held: dict[bytes, bytes],
) -> list[bytes]:
    """Each entry's bytes; `MissingHistoryError` for a piece kept from the base that is
    gone, else `MissingPiecesError` listing every piece named and not held. O(entries)."""
    segments: list[bytes] = []
    lacking: dict[bytes, None] = {}
    for entry in entries:
        if not is_piece(entry):
            segments.append(literal_of(entry))
            continue
        piece = piece_of(entry)
        found = carried.get(piece)
        if found is None:
            found = held.get(piece)
        if found is None:
            lacking[piece] = None
        else:
            segments.append(found)
    if not lacking:
        return segments
    kept = [piece for piece in lacking if piece not in named]
    if base is not None and kept:
        raise MissingHistoryError(
            f"the edit's base {base.ref} is not held whole (its piece {piece_ref(kept[0])} "
            "is gone); send the edit again with no base (`b` null)",
            base.ref,
        )
    raise MissingPiecesError(
        f"the edit names {len(lacking)} piece(s) this registry does not hold (never kept for "
        "this API key, expired or evicted): missingPieces lists them; send the edit again "
        "with those segments inline",
        [piece_ref(p) for p in lacking],
    )
