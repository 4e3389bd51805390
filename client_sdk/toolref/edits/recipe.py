"""Recipes: a request as its list of entries, and the refs that name pieces and recipes.

An entry is a segment as the registry keeps it: a piece (`PIECE` then its 16-byte id, the
first 16 bytes of the segment's SHA-256) for a segment of `PIECE_MIN` bytes or more, else
the segment itself (`LITERAL` then its bytes). A recipe's ref (`tb_`, 26 base32 characters)
digests its entries in order, each with its length (`framed`: a long literal by its own
digest): client and registry compute it alike, and a registry confirms the ref the client
computed or answers a problem.

`PIECE_MIN` is 16 KiB: a segment shorter than that (most messages) is a literal, which the
registry stores once, compressed beside the literals of the turns around it, instead of as
a value of its own; a kept range covers it as it covers a piece. Pieces are the large
segments (a tool list, a system prompt, a long tool result): named across recipes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Final

from toolref.wire.canonical import digest_key, key_digest

PIECE_MIN: Final = 16 << 10  # a shorter segment is kept in the recipe itself
RUN_MIN: Final = 16  # a segment this long or longer can start a kept range (`edit.diff`)
ID_BYTES: Final = 16
PIECE: Final = b"\x00"
LITERAL: Final = b"\x01"
PIECE_PREFIX: Final = "tp_"
RECIPE_PREFIX: Final = "tb_"
_REF_RE: Final = re.compile(r"[a-z2-7]{25}[aeimquy4]")
_START: Final = hashlib.sha256(b"toolref recipe v1").digest()

Entry = bytes  # PIECE + id, or LITERAL + the segment's bytes


def piece_id(segment: bytes) -> bytes:
    return hashlib.sha256(segment).digest()[:ID_BYTES]


def entry_of(segment: bytes) -> Entry:
    """The entry a recipe keeps for `segment`."""
    if len(segment) >= PIECE_MIN:
        return PIECE + piece_id(segment)
    return LITERAL + segment


def is_piece(entry: Entry) -> bool:
    return entry[:1] == PIECE


def piece_of(entry: Entry) -> bytes:
    """The id of a piece entry."""
    return entry[1:]


def literal_of(entry: Entry) -> bytes:
    """The bytes of a literal entry."""
    return entry[1:]


def piece_ref(piece: bytes) -> str:
    return PIECE_PREFIX + _base32(piece)


def parse_piece_ref(text: object) -> bytes | None:
    """The id a `tp_` ref names; None when `text` is not one."""
    return _parse(text, PIECE_PREFIX)


def framed(entry: Entry) -> bytes:
    """`entry` as a recipe's ref digests it: its length (4 bytes), then itself, or for an
    entry longer than a piece's (a literal of more than 16 bytes) `LITERAL` and the first
    16 bytes of its SHA-256: a recipe's ref costs 21 bytes of digest per entry, whatever
    its literals' lengths (linear in the entry, once)."""
    head = len(entry).to_bytes(4, "big")
    if len(entry) <= 1 + ID_BYTES:
        return head + entry
    return head + LITERAL + hashlib.sha256(entry).digest()[:ID_BYTES]


def recipe_ref(entries: Iterable[Entry]) -> str:
    """The ref of the recipe of `entries` (linear in them)."""
    return ref_of_framed([framed(entry) for entry in entries])


def ref_of_framed(framed_entries: Sequence[bytes]) -> str:
    """The ref of the recipe whose entries, `framed`, are these: one SHA-256 over their
    concatenation (C speed: a holder of the framed entries digests a recipe without a
    Python step per entry)."""
    digest = hashlib.sha256(_START)
    digest.update(b"".join(framed_entries))
    return RECIPE_PREFIX + _base32(digest.digest()[:ID_BYTES])


def is_recipe_ref(text: object) -> bool:
    return _parse(text, RECIPE_PREFIX) is not None


def parse_recipe_ref(text: object) -> bytes | None:
    """The 16 bytes a `tb_` ref names; None when `text` is not one."""
    return _parse(text, RECIPE_PREFIX)


def recipe_ref_of(digest: bytes) -> str:
    """The `tb_` ref of 16 bytes (`parse_recipe_ref` reversed)."""
    return RECIPE_PREFIX + _base32(digest)


def _base32(data: bytes) -> str:
    return digest_key(data)


def _parse(text: object, prefix: str) -> bytes | None:
    if not isinstance(text, str) or not text.startswith(prefix):
        return None
    body = text[len(prefix) :]
    if not _REF_RE.fullmatch(body):
        return None
    return key_digest(body)
