"""The stored form of one invocation.

Layout: one version byte, the 32-byte SHA-256 digest, one flags byte, then a msgpack map,
zstd-compressed when that is smaller. The digest sits at a fixed offset so a collision check
reads 32 bytes (GETRANGE) instead of the whole payload.

Version 2 keeps the arguments and the result as the JSON text the registering client wrote
(`{"name", "err", "args", "result", "size", "created"}`), so a marker is filled back with
exactly those bytes (key order, `1.0`, `-0.0`), never a re-encoding. Version 1 records
(`{"inv": invocation, "size", "created"}`) are still read: their payloads are written as
compact JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from toolref.canonical import Ref, invocation_digest
from toolref.encoding import dumps_json, loads_fast, packb, unpackb
from toolref.formats.source import Payload
from toolref_server import compressors

VERSION: Final = 2
_READABLE: Final = (1, 2)
DIGEST_START: Final = 1
DIGEST_END: Final = 33  # exclusive
_FLAGS_AT: Final = 33
_BODY_AT: Final = 34
_ZSTD: Final = 1


class CorruptRecordError(Exception):
    """Bytes under a record key that are not a record this code wrote."""


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


def encode(
    name: str,
    *,
    is_error: bool,
    payload: Payload,
    digest: bytes,
    size: int,
    compress_threshold: int,
) -> bytes:
    fields = {
        "name": name,
        "err": is_error,
        "args": payload.args,
        "result": payload.result,
        "size": size,
        "created": int(time.time()),
    }
    body = packb(fields)
    flags = 0
    if len(body) >= compress_threshold:
        packed = compressors.compress(body)
        if len(packed) < len(body):
            body, flags = packed, _ZSTD
    return bytes((VERSION,)) + digest + bytes((flags,)) + body


def encode_values(
    invocation: Mapping[str, Any], digest: bytes, size: int, compress_threshold: int
) -> bytes:
    """`encode` for an invocation that arrived as values (payloads written compact)."""
    return encode(
        invocation["name"],
        is_error=bool(invocation.get("isError", False)),
        payload=payload_of(invocation),
        digest=digest,
        size=size,
        compress_threshold=compress_threshold,
    )


def decode(data: bytes) -> Record:
    if len(data) < _BODY_AT or data[0] not in _READABLE:
        raise CorruptRecordError(f"record has version {data[:1]!r}, expected {VERSION}")
    body = data[_BODY_AT:]
    if data[_FLAGS_AT] & _ZSTD:
        body = compressors.decompress(body)
    fields = unpackb(body)
    digest = data[DIGEST_START:DIGEST_END]
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
