"""Stored histories: messages content-addressed, and one node per confirmed head.

A message is stored in chain form (see `toolref.history`) as the JSON text its client wrote
(markers in place of payloads), zstd-compressed with the shipped messages dictionary
(`compressors.writing`), once per tenant under the first 16 bytes of
the SHA-256 of that text. A node, under its history ref, names the conversation's format and
lists its messages' ids (16 bytes each), so any history comes back in two batched round
trips whatever its length: GET the node, then MGET its messages (one MGET per hash slot on a
cluster). A message's text is checked against its id, and the chain rebuilt from the texts
against the ref, before it is used. Lifetimes slide as for tool refs: loading a history
extends the node and every message in it.

A node lists all its messages, so the nodes of one conversation confirmed at every turn hold
O(turns²) ids. Clients continue the newest head, and an older one only after an edit, so
when a history is continued the node it continued (now superseded) keeps only
`superseded_ttl` seconds of life (TOOLREF_HISTORY_SUPERSEDED_TTL): past it, continuing it
costs the client one resend of the whole conversation, which it does by itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.canonical import canonical_json, digest_key
from toolref.history import chain, history_ref
from toolref_server import compressors
from toolref_server.store import Store
from toolref_server.workers import Workers

_ID_BYTES: Final = 16
_SEPARATOR: Final = b"\0"  # between the format name and the ids in a node


@dataclass(frozen=True, slots=True)
class Stored:
    """A loaded history: its format, and its messages in chain form as values, as the text
    their client wrote, and as canonical JSON (so a longer history saved after it need not
    encode them again)."""

    format: str
    form: list[Any]
    texts: list[str]
    encoded: list[bytes]


def _stored(ref: str, name: bytes, ids: list[bytes], values: list[bytes]) -> Stored | None:
    """A loaded history from its stored bytes, checked (linear in them); None when they are
    not what the node names (corrupt bytes included: a history that cannot be read is not
    held, so the client resends the conversation)."""
    try:
        texts = [compressors.decompress(value).decode() for value in values]
        if any(message_id(text) != i for text, i in zip(texts, ids, strict=True)):
            return None  # not the bytes the node was written with
        form = [json.loads(text) for text in texts]
        encoded = [canonical_json(message) for message in form]
    except Exception:  # corrupt bytes fail in many ways (zstd, UTF-8, JSON)
        return None
    found = chain(encoded)
    if not found or history_ref(found[-1]) != ref:
        return None  # not what the ref names (a 128-bit collision, or foreign bytes)
    return Stored(name.decode("ascii", "replace"), form, texts, encoded)


def message_id(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()[:_ID_BYTES]


class Histories:
    def __init__(
        self, store: Store, workers: Workers | None = None, *, superseded_ttl: int | None = None
    ) -> None:
        self.store = store
        self.workers = workers
        # Never longer than the full lifetime; None: superseded nodes keep it.
        self.superseded_ttl = min(superseded_ttl or store.ttl, store.ttl)

    @staticmethod
    def node_key(tenant: str, ref: str) -> str:
        return f"tr:{tenant}:h:{ref[3:]}"

    @staticmethod
    def message_key(tenant: str, message: bytes) -> str:
        return f"tr:{tenant}:m:{digest_key(message)}"

    async def load(self, tenant: str, ref: str) -> Stored | None:
        """History `ref`, or None when it is not held (never confirmed, expired, evicted, or
        a message of it is gone)."""
        store, node_key = self.store, self.node_key(tenant, ref)
        (node,) = await store.read_and_touch(tenant, [node_key], "history")
        name, _, packed = (node or b"").partition(_SEPARATOR)
        if not packed or len(packed) % _ID_BYTES:
            return None
        ids = [packed[i : i + _ID_BYTES] for i in range(0, len(packed), _ID_BYTES)]
        keys = [self.message_key(tenant, i) for i in ids]
        values = await store.read_and_touch(tenant, keys, "history")
        if any(value is None for value in values):
            return None
        size = sum(map(len, values))
        if self.workers is None:
            return _stored(ref, name, ids, values)
        return await self.workers.run(size, _stored, ref, name, ids, values)

    async def save(
        self,
        tenant: str,
        fmt: str,
        texts: Sequence[str],
        encoded: Sequence[bytes],
        start: int = 0,
    ) -> str:
        """Store a history and return its ref: `texts` are its messages in chain form as
        written, `encoded` the same as canonical JSON. Messages before `start` are known to
        be stored already (they were just loaded): only their lifetime moved."""
        if not texts:
            raise ValueError("an empty history has no ref")
        store = self.store
        ids = [message_id(text) for text in texts]
        found = chain(encoded)
        ref = history_ref(found[-1])
        keys = [self.message_key(tenant, ids[index]) for index in range(start, len(texts))]
        packed = [
            compressors.compress(texts[index].encode(), "messages")
            for index in range(start, len(texts))
        ]
        node_key, node = (
            self.node_key(tenant, ref),
            fmt.encode("ascii") + _SEPARATOR + b"".join(ids),
        )
        cost = await store.cost_of_writing(
            tenant, [*keys, node_key], [*map(len, packed), len(node)]
        )
        async with store.guard("history"):
            pipe = store.redis.pipeline(transaction=False)
            for key, data in zip(keys, packed, strict=True):
                pipe.set(key, data, nx=True, ex=store.ttl)
                pipe.expire(key, store.ttl)
            pipe.set(node_key, node, ex=store.ttl)
            if 0 < start < len(texts) and self.superseded_ttl < store.ttl:
                # The head this continues: LT only ever shortens (never revives) it.
                superseded = self.node_key(tenant, history_ref(found[start - 1]))
                pipe.expire(superseded, self.superseded_ttl, lt=True)
            store.charge(pipe, tenant, cost)
            await pipe.execute()
        return ref
