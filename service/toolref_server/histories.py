"""Stored histories: messages content-addressed, and one node per confirmed head.

A message (in chain form, see `toolref.history`) is stored once per tenant under the first
16 bytes of its digest, zstd-compressed canonical JSON. A node, under its history ref, is the
list of its messages' ids (16 bytes each), so any history comes back in two batched round
trips whatever its length: GET the node, then MGET its messages (one MGET per hash slot on a
cluster). The node also names the conversation's format, so a continuation reads it the same
way. The rebuilt chain is checked against the ref before it is used. Lifetimes slide as for
tool refs: loading a history extends the node and every message in it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import zstandard

from toolref.canonical import canonical_json, digest_key
from toolref.history import chain, history_ref
from toolref_server.store import Store

_ID_BYTES: Final = 16
_SEPARATOR: Final = b"\0"  # between the format name and the ids in a node
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()


@dataclass(frozen=True, slots=True)
class Stored:
    """A loaded history: its format, and its messages in chain form (and as stored:
    canonical JSON, so a longer history saved after it need not encode them again)."""

    format: str
    form: list[Any]
    encoded: list[bytes] = field(default_factory=list, compare=False, repr=False)


class Histories:
    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def node_key(tenant: str, ref: str) -> str:
        return f"tr:{tenant}:h:{ref[3:]}"

    @staticmethod
    def message_key(tenant: str, message_id: bytes) -> str:
        return f"tr:{tenant}:m:{digest_key(message_id)}"

    async def load(self, tenant: str, ref: str) -> Stored | None:
        """History `ref`, or None when it is not held (never confirmed, expired, evicted, or
        a message of it is gone)."""
        store, node_key = self.store, self.node_key(tenant, ref)
        async with store.guard("history"):
            pipe = store.redis.pipeline(transaction=False)
            pipe.get(node_key)
            pipe.expire(node_key, store.ttl)
            node, _ = await pipe.execute()
        name, _, packed = (node or b"").partition(_SEPARATOR)
        if not packed or len(packed) % _ID_BYTES:
            return None
        ids = [packed[i : i + _ID_BYTES] for i in range(0, len(packed), _ID_BYTES)]
        keys = [self.message_key(tenant, i) for i in ids]
        values = await store.read_and_touch(keys, "history")
        if any(value is None for value in values):
            return None
        encoded = [_decompressor.decompress(value) for value in values]
        found = chain(encoded)
        if not found or history_ref(found[-1]) != ref:
            return None  # not what the ref names (a 128-bit collision, or foreign bytes)
        form = [json.loads(data) for data in encoded]
        return Stored(name.decode("ascii", "replace"), form, encoded)

    async def save(
        self,
        tenant: str,
        fmt: str,
        form: Sequence[Any],
        start: int = 0,
        known: Sequence[bytes] = (),
    ) -> str:
        """Store history `form` (chain form, in format `fmt`) and return its ref. Messages
        before `start` are known to be stored already (they were just loaded): only their
        lifetime moved, and `known` holds their canonical JSON."""
        if not form:
            raise ValueError("an empty history has no ref")
        store = self.store
        reused = min(start, len(known))
        encoded = [*known[:reused], *(canonical_json(m) for m in form[reused:])]
        ids = [hashlib.sha256(data).digest()[:_ID_BYTES] for data in encoded]
        ref = history_ref(chain(encoded)[-1])
        async with store.guard("history"):
            pipe = store.redis.pipeline(transaction=False)
            for index in range(start, len(form)):
                key = self.message_key(tenant, ids[index])
                pipe.set(key, _compressor.compress(encoded[index]), nx=True, ex=store.ttl)
                pipe.expire(key, store.ttl)
            node = fmt.encode("ascii") + _SEPARATOR + b"".join(ids)
            pipe.set(self.node_key(tenant, ref), node, ex=store.ttl)
            await pipe.execute()
        return ref
