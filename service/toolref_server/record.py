"""The stored form of one invocation.

Layout: one version byte, the 32-byte SHA-256 digest, one flags byte, then a msgpack map
`{"inv": invocation, "size": canonical size, "created": unix seconds}`, zstd-compressed when
that is smaller. The digest sits at a fixed offset so a collision check reads 32 bytes
(GETRANGE) instead of the whole payload.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import zstandard

from toolref.encoding import packb, unpackb

VERSION: Final = 1
DIGEST_START: Final = 1
DIGEST_END: Final = 33  # exclusive
_FLAGS_AT: Final = 33
_BODY_AT: Final = 34
_ZSTD: Final = 1
_LEVEL: Final = 3

_compressor = zstandard.ZstdCompressor(level=_LEVEL)
_decompressor = zstandard.ZstdDecompressor()


class CorruptRecordError(Exception):
    """Bytes under a record key that are not a record this code wrote."""


@dataclass(frozen=True, slots=True)
class Record:
    invocation: dict[str, Any]
    digest: bytes
    size: int
    created: int


def encode(invocation: dict[str, Any], digest: bytes, size: int, compress_threshold: int) -> bytes:
    body = packb({"inv": invocation, "size": size, "created": int(time.time())})
    flags = 0
    if len(body) >= compress_threshold:
        packed = _compressor.compress(body)
        if len(packed) < len(body):
            body, flags = packed, _ZSTD
    return bytes((VERSION,)) + digest + bytes((flags,)) + body


def decode(data: bytes) -> Record:
    if len(data) < _BODY_AT or data[0] != VERSION:
        raise CorruptRecordError(f"record has version {data[:1]!r}, expected {VERSION}")
    body = data[_BODY_AT:]
    if data[_FLAGS_AT] & _ZSTD:
        body = _decompressor.decompress(body)
    fields = unpackb(body)
    return Record(
        invocation=fields["inv"],
        digest=data[DIGEST_START:DIGEST_END],
        size=fields["size"],
        created=fields["created"],
    )
