"""Pieces of edited requests as stored: their ids, their bytes compressed for the store and
inflated back (each checked against its id), and the bound on what an edit's named pieces
may inflate to, checked before any is (a piece declaring more than that bound by itself is
corrupt, not large: `impossible`).

Pure: no I/O (`recipes` reads and writes them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from toolref.edits.recipe import ID_BYTES
from toolref.wire.errors import DecompressedTooLargeError
from toolref_server.storage import compressors

Bound = tuple[int, bytes | None]  # (limit, the id of a piece the limit leaves out)


def piece_id(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:ID_BYTES]


def inflated(pairs: Sequence[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Each (id, stored value) inflated and checked against its id; those that fail are
    left out (not held). Linear in the bytes."""
    found: dict[bytes, bytes] = {}
    for piece, value in pairs:
        data = _decompressed(value)
        if data is not None and piece_id(data) == piece:
            found[piece] = data
    return found


def _decompressed(value: bytes) -> bytes | None:
    try:
        return compressors.decompress(value)
    except Exception:  # corrupt bytes fail in many ways (zstd, an unknown dictionary)
        return None


def compressed(pieces: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(piece, compressors.compress(data, "messages")) for piece, data in pieces]


def bounded(
    bound: Bound,
    cached: Mapping[bytes, bytes],
    ids: Sequence[bytes],
    stored: Sequence[bytes | None],
) -> None:
    """Refuse pieces whose bytes, but the one `bound` leaves out, pass its limit: those
    held in memory (`cached`), and those read (`stored`, of `ids`) by the sizes their zstd
    frames declare, before any is inflated. Linear in them (a frame's header each). Drop
    the `impossible` ones first: they are corrupt, not large."""
    limit, aside = bound
    size = sum(len(data) for piece, data in cached.items() if piece != aside)
    size += sum(
        compressors.inflated_size(value)
        for piece, value in zip(ids, stored, strict=True)
        if value is not None and piece != aside
    )
    if size > limit:
        raise DecompressedTooLargeError(
            f"the edit names pieces of {size} bytes, over the limit of {limit} on the body "
            "it stands for (TOOLREF_MAX_DECOMPRESSED_BYTES); send a smaller request",
            limit=limit,
        )


def impossible(bound: Bound, ids: Sequence[bytes], stored: Sequence[bytes | None]) -> list[int]:
    """The places in `stored` (of `ids`) of values whose frames declare more than the limit
    by themselves: a piece is a segment of a body that limit bounds (an edit standing for
    more is refused before anything is kept), so those are frame headers gone bad, not
    large pieces: unreadable, as any corrupt value (deleted; a miss the sender recovers
    from). The headers' segment (`aside`, outside the limit) is left to the inflate's
    check. Linear in them (a frame's header each)."""
    limit, aside = bound
    return [
        at
        for at, (piece, value) in enumerate(zip(ids, stored, strict=True))
        if value is not None and piece != aside and compressors.inflated_size(value) > limit
    ]
