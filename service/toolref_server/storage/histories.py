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

A node also carries what continuing the history needs without reading its messages: the
chain head, how `formats.detect` stands after them, how many calls wait for a result, and
when every message and tool ref of it was last extended (`refreshed`). A node never outlives
that refresh by more than the TTL, so while it exists its messages do too (unless evicted:
then the next whole load answers missing, and the client resends). `extend` writes a
continuation from the node alone: the new messages and the new node, O(new) plus the ids.

A node lists all its messages, so the nodes of one conversation confirmed at every turn hold
O(turns²) ids. Clients continue the newest head, and an older one only after an edit, so
when a history is continued the node it continued (now superseded) keeps only
`superseded_ttl` seconds of life (TOOLREF_HISTORY_SUPERSEDED_TTL): past it, continuing it
costs the client one resend of the whole conversation, which it does by itself.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.formats import Detection, is_format_name
from toolref.history import chain, history_ref
from toolref.receiving.workers import Workers
from toolref.wire.canonical import canonical_json
from toolref.wire.encoding import loads_fast, packb, unpackb
from toolref.wire.models import FormatName
from toolref_server.storage import compressors, keys
from toolref_server.storage.store import Put, Store

_ID_BYTES: Final = 16
_SEPARATOR: Final = b"\0"  # between the format name and the ids in a version-1 node
_NODE_V2: Final = 2  # first byte of a version-2 node (a format name never starts with it)


@dataclass(frozen=True, slots=True)
class Node:
    """What a history's node holds. `head`, `detection` and `pending` are None in a node
    written before they were kept (version 1): such a history is continued the whole way."""

    format: str
    ids: list[bytes]
    head: bytes | None = None
    refreshed: int = 0  # epoch seconds: every message and tool ref extended then
    detection: Detection | None = None
    pending: int | None = None  # calls in the history without a result yet

    def encode(self) -> bytes:
        if self.head is None or self.detection is None or self.pending is None:
            return self.format.encode("ascii") + _SEPARATOR + b"".join(self.ids)
        fields = {
            "f": self.format,
            "h": self.head,
            "r": self.refreshed,
            "d": self.detection.scores,
            "p": self.pending,
            "i": b"".join(self.ids),
        }
        return bytes((_NODE_V2,)) + packb(fields)

    @classmethod
    def decode(cls, data: bytes) -> Node | None:
        """The node in `data`; None for bytes no version wrote (read as not held)."""
        try:
            if data[:1] == bytes((_NODE_V2,)):
                fields = unpackb(data[1:])
                scores = fields["d"]
                if not all(is_format_name(n) and type(v) is int for n, v in scores.items()):
                    return None
                ids = _ids(fields["i"])
                head = fields["h"]
                if ids is None or not isinstance(head, bytes) or len(head) != 32:
                    return None
                return cls(
                    str(fields["f"]),
                    ids,
                    head,
                    int(fields["r"]),
                    Detection(scores, len(ids)),
                    int(fields["p"]),
                )
        except Exception:  # corrupt bytes fail in many ways (msgpack, keys, types)
            return None
        name, _, packed = data.partition(_SEPARATOR)
        ids = _ids(packed)
        return None if ids is None else cls(name.decode("ascii", "replace"), ids)

    @property
    def count(self) -> int:
        return len(self.ids)

    def continued(self, ref: str) -> bool:
        """True when this node can be continued without its messages: it keeps its head,
        and the head is the one `ref` names."""
        return self.head is not None and history_ref(self.head) == ref


def _ids(packed: object) -> list[bytes] | None:
    if not isinstance(packed, bytes) or not packed or len(packed) % _ID_BYTES:
        return None
    return [packed[i : i + _ID_BYTES] for i in range(0, len(packed), _ID_BYTES)]


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
    except Exception:  # corrupt bytes fail in many ways (zstd, UTF-8)
        return None
    # Integers beyond 64 bits are read exactly only by the stdlib: asked before refusing.
    parsed = _parsed(texts, loads_fast, ref) or _parsed(texts, json.loads, ref)
    if parsed is None:
        return None  # not what the ref names (a 128-bit collision, or foreign bytes)
    form, encoded = parsed
    return Stored(name.decode("ascii", "replace"), form, texts, encoded)


def _parsed(
    texts: list[str], loads: Callable[[str], Any], ref: str
) -> tuple[list[Any], list[bytes]] | None:
    """The messages read by `loads` and as canonical JSON, if they chain to `ref`."""
    try:
        form = [loads(text) for text in texts]
        encoded = [canonical_json(message) for message in form]
    except Exception:  # not JSON, or not canonical (NaN)
        return None
    found = chain(encoded)
    return (form, encoded) if found and history_ref(found[-1]) == ref else None


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
        return keys.history_node(tenant, ref)

    @staticmethod
    def message_key(tenant: str, message: bytes) -> str:
        return keys.history_message(tenant, message)

    async def node(self, tenant: str, ref: str) -> Node | None:
        """The node of history `ref` (its lifetime left as it is: a continuation writes
        the next one), or None when it is not held. One GET."""
        data = await self.store.get(self.node_key(tenant, ref), "history")
        return None if data is None else Node.decode(data)

    async def read_node(self, tenant: str, ref: str) -> Node | None:
        """The node of history `ref` as a load reads it (its lifetime extended, counted for
        the stored-bytes quota), or None when it is not held. One round trip."""
        key = self.node_key(tenant, ref)
        (data,) = await self.store.read_and_touch(tenant, [key], "history")
        return None if data is None else Node.decode(data)

    async def load(self, tenant: str, ref: str, node: Node | None = None) -> Stored | None:
        """History `ref`, or None when it is not held (never confirmed, expired, evicted, or
        a message of it is gone). `node`: its node, when already read (it is then not
        read again)."""
        if node is None:
            node = await self.read_node(tenant, ref)
            if node is None:
                return None
        names = [self.message_key(tenant, i) for i in node.ids]
        values = await self.store.read_and_touch(tenant, names, "history")
        if any(value is None for value in values):
            return None
        size = sum(map(compressors.inflated_size, values))  # the work, not the bytes read
        if self.workers is None:
            return _stored(ref, node.format.encode(), node.ids, values)
        return await self.workers.run(size, _stored, ref, node.format.encode(), node.ids, values)

    async def save(
        self,
        tenant: str,
        fmt: str,
        texts: Sequence[str],
        encoded: Sequence[bytes],
        start: int = 0,
        *,
        detection: Detection | None = None,
        pending: int | None = None,
    ) -> str:
        """Store a history and return its ref: `texts` are its messages in chain form as
        written, `encoded` the same as canonical JSON. Messages before `start` are known to
        be stored already (they were just loaded, so every lifetime in it was extended
        now). With `detection` and `pending` (see `Node`) the node lets the next turn
        continue it without reading its messages."""
        if not texts:
            raise ValueError("an empty history has no ref")
        ids = [message_id(text) for text in texts]
        found = chain(encoded)
        node = Node(fmt, ids, found[-1], int(time.time()), detection, pending)
        superseded = history_ref(found[start - 1]) if 0 < start < len(texts) else None
        return await self._write(tenant, node, ids[start:], texts[start:], superseded)

    async def extend(
        self,
        tenant: str,
        before: Node,
        texts: Sequence[str],
        encoded: Sequence[bytes],
        *,
        format: FormatName,
        detection: Detection,
        pending: int,
    ) -> str:
        """Store the history `before` followed by `texts` (chain form as written; `encoded`
        the same as canonical JSON) and return its ref, from the node alone: O(new) but
        for the ids. Its node keeps `before`'s refresh time, so it expires no later than
        the messages it names; its format is the one the whole conversation was read in
        (`before`'s may have been a guess, made when its messages fitted several)."""
        if not texts or before.head is None:
            raise ValueError("extend needs new messages and a node that keeps its head")
        ids = [message_id(text) for text in texts]
        head = chain(encoded, before.head)[-1]
        node = Node(format, [*before.ids, *ids], head, before.refreshed, detection, pending)
        return await self._write(tenant, node, ids, texts, history_ref(before.head))

    async def checkpoint(self, tenant: str, node: Node) -> str:
        """Write the node of a checkpoint (its messages are stored already, by the history
        it is a prefix of) and return its ref. It is for the next turn only, so it lives
        `superseded_ttl` at most."""
        store = self.store
        assert node.head is not None
        ref = history_ref(node.head)
        lifetime = max(1, min(self.superseded_ttl, node.refreshed + store.ttl - int(time.time())))
        await store.put(
            tenant, "history", [Put(self.node_key(tenant, ref), node.encode(), lifetime)]
        )
        return ref

    async def _write(
        self,
        tenant: str,
        node: Node,
        ids: Sequence[bytes],
        texts: Sequence[str],
        superseded: str | None,
    ) -> str:
        """Write the messages not yet stored and the node; the node lives until its
        `refreshed` time plus the TTL (a message lives at least that long). `superseded`:
        the history this one continues, whose lifetime is shortened."""
        store = self.store
        assert node.head is not None
        ref = history_ref(node.head)
        puts = [
            Put(
                self.message_key(tenant, i),
                compressors.compress(text.encode(), "messages"),
                store.ttl,
                keep=True,
            )
            for i, text in zip(ids, texts, strict=True)
        ]
        lifetime = max(1, min(store.ttl, node.refreshed + store.ttl - int(time.time())))
        puts.append(Put(self.node_key(tenant, ref), node.encode(), lifetime))
        shorten = []
        if superseded is not None and superseded != ref and self.superseded_ttl < store.ttl:
            # The head this continues: shortened only (never revived or lengthened).
            shorten.append((self.node_key(tenant, superseded), self.superseded_ttl))
        await store.put(tenant, "history", puts, shorten=shorten)
        return ref
