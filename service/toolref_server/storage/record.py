"""The stored form of one invocation.

Layout: one version byte, the 32-byte SHA-256 digest, one flags byte, then a msgpack body,
zstd-compressed when that is smaller. The digest sits at a fixed offset so a collision check
reads 32 bytes (GETRANGE) instead of the whole payload.

Version 3 (written now) is a msgpack array `[name, err, args, result, size, created]`, the
arguments and the result as the JSON text the registering client wrote, so a marker is
filled back with exactly those bytes (key order, `1.0`, `-0.0`), never a re-encoding. Its
zstd frame may be compressed with a shipped dictionary (`toolref.wire.dictionaries`); the
frame names it by its id, so records written with any shipped dictionary stay readable, and
one naming a dictionary this version lacks is corrupt (read as missing: the client resends).
Still read: version 2, the same fields as a msgpack map (`{"name", "err", "args", "result",
"size", "created"}`), and version 1 (`{"inv": invocation, "size", "created"}`), whose payloads
are written as compact JSON; neither used a dictionary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from toolref.formats.source import Payload
from toolref.wire.canonical import Ref, invocation_digest
from toolref.wire.encoding import dumps_json, loads_fast, packb, unpackb
from toolref_server.storage import compressors

VERSION: Final = 3
_READABLE: Final = (1, 2, 3)
DIGEST_START: Final = 1
DIGEST_END: Final = 33  # exclusive
_FLAGS_AT: Final = 33
_BODY_AT: Final = 34
_ZSTD: Final = 1


class CorruptRecordError(Exception):
    """Bytes under a record key that are not a record this code wrote."""


class UnknownDictionaryError(CorruptRecordError):
    """A record compressed with a dictionary this version does not ship (a newer one's)."""


@dataclass(frozen=True, slots=True)
class Record:
    name: str
    is_error: bool
    payload: Payload  # arguments and result as JSON text
    digest: bytes
    size: int
    created: int

    def invocation(self) -> dict[str, Any]:
        """The invocation in wire form (its payloads parsed)."""
        return {
            "name": self.name,
            "args": json.loads(self.payload.args),
            "result": json.loads(self.payload.result),
            "isError": self.is_error,
        }

    def wire_text(self) -> str:
        """The invocation in wire form as JSON text, payloads exactly as registered."""
        return (
            '{"name":'
            + json.dumps(self.name, ensure_ascii=False)
            + ',"args":'
            + self.payload.args
            + ',"result":'
            + self.payload.result
            + ',"isError":'
            + ("true" if self.is_error else "false")
            + "}"
        )


def payload_of(invocation: Mapping[str, Any]) -> Payload:
    """Payload texts for an invocation that arrived as values (written as compact JSON)."""
    return Payload(
        dumps_json(invocation["args"]).decode(), dumps_json(invocation["result"]).decode()
    )


def body(name: str, is_error: bool, payload: Payload, size: int, created: int) -> bytes:
    """The uncompressed body of a version 3 record (what its dictionary is trained on)."""
    return packb([name, is_error, payload.args, payload.result, size, created])


def encode(
    name: str,
    *,
    is_error: bool,
    payload: Payload,
    digest: bytes,
    size: int,
    compress_threshold: int,
) -> bytes:
    """A version 3 record, compressed as `compressors.writing` says (dictionary, level)."""
    data = body(name, is_error, payload, size, int(time.time()))
    flags = 0
    if len(data) >= compress_threshold:
        packed = compressors.compress(data, "records")
        if len(packed) < len(data):
            data, flags = packed, _ZSTD
    return bytes((VERSION,)) + digest + bytes((flags,)) + data


def work_size(data: bytes) -> int:
    """Bytes that checking the record in `data` works on: its content once inflated (the
    size its zstd frame declares, read without inflating), so a small compressed record
    that inflates to megabytes is not taken for small work."""
    if len(data) > _BODY_AT and data[_FLAGS_AT] & _ZSTD:
        return _BODY_AT + compressors.inflated_size(data[_BODY_AT:])
    return len(data)


def decode(data: bytes) -> Record:
    if len(data) < _BODY_AT or data[0] not in _READABLE:
        raise CorruptRecordError(f"record has version {data[:1]!r}, expected {VERSION}")
    packed = data[_BODY_AT:]
    if data[_FLAGS_AT] & _ZSTD:
        try:
            packed = compressors.decompress(packed)
        except compressors.UnknownDictionaryError as exc:
            raise UnknownDictionaryError(str(exc)) from None
    fields = unpackb(packed)
    digest = data[DIGEST_START:DIGEST_END]
    if data[0] == 3:
        name, is_error, args, result, size, created = fields
        if not (isinstance(args, str) and isinstance(result, str)):
            raise CorruptRecordError("record payloads are not JSON text")
        return Record(name, bool(is_error), Payload(args, result), digest, size, created)
    if data[0] == 1:
        invocation = fields["inv"]
        return Record(
            invocation["name"],
            bool(invocation.get("isError", False)),
            payload_of(invocation),
            digest,
            fields["size"],
            fields["created"],
        )
    return Record(
        fields["name"],
        fields["err"],
        Payload(fields["args"], fields["result"]),
        digest,
        fields["size"],
        fields["created"],
    )


def content_digest(rec: Record, loads: Callable[[str], Any] = json.loads) -> bytes:
    """The SHA-256 of the canonical invocation `rec` holds, recomputed from its payload
    texts (parsed by `loads`, then written canonically): linear in the payloads."""
    args, result = loads(rec.payload.args), loads(rec.payload.result)
    return invocation_digest(rec.name, args, result, rec.is_error).sha256


def verified(data: bytes, ref: Ref) -> Record | None:
    """The record in `data` if it holds what `ref` names: it decodes, the SHA-256 of its
    content recomputed equals the 32-byte digest it stores, and that digest starts with the
    ref's 16 bytes. None for anything else (bytes this code never wrote, a flipped bit, a
    record planted under another ref), so a corrupted record is never served."""
    try:
        rec = decode(data)
    except Exception:  # corrupt bytes fail in many ways (zstd, msgpack, keys, types)
        return None
    if rec.digest[: len(ref.digest_prefix)] != ref.digest_prefix:
        return None
    # Integers beyond 64 bits are read exactly only by the stdlib: asked before refusing.
    if _holds(rec, loads_fast) or _holds(rec, json.loads):
        return rec
    return None


def _holds(rec: Record, loads: Callable[[str], Any]) -> bool:
    try:
        return content_digest(rec, loads) == rec.digest
    except Exception:  # not JSON, or not canonical (NaN)
        return False
