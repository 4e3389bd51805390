"""`Answers`: the answer each recipe's request streamed (`toolref.edits.answer`), kept so
that any worker or replica can read the next edit of it, whose model's segments were
compressed against it (version 3).

The gateway keeps an answer before the end of its stream reaches the client (so the next
turn always finds it; a channel's turn, whose next turn comes to the same process, has it
written while its end goes on, `keeping`, and a read of it here waits for that), under the
tenant and the recipe's ref, zstd-compressed, for the store's TTL, until the next edit of
the recipe is kept (`Recipes.keep` deletes it then, once its write under way here ended:
it was that edit's dictionary; a regenerated turn after it, on another process, is
refused 400 and sent again without it); recent ones stay in this process too
(`cache_bytes`), which may still serve one deleted from the store, or one the store could
not keep: it is the same answer, so the edit reads back the same. An answer no process
holds (the store down on another replica, the stored-bytes quota) is refused 400
`dictionary-mismatch`, and the edit sent again without it. Each call is at most one round
trip, linear in the answer (`answer.MAX_ANSWER` bytes at most).
"""

from __future__ import annotations

import asyncio

import zstandard

from toolref.kit.lru import LRU
from toolref.wire.errors import ToolrefError
from toolref_server.storage import keys
from toolref_server.storage.store import Put, Store
from toolref_server.storage.under_way import ANSWER, UnderWay

_ACTION = "keep the answer of an edited request"
_READ = "read the answer an edit names"
_LEVEL = 3


class Answers:
    """See the module docstring."""

    def __init__(self, store: Store, cache_bytes: int, under_way: UnderWay | None = None) -> None:
        self.store = store
        self.cache: LRU[tuple[str, str], bytes] = LRU(max(1, cache_bytes // 256), cache_bytes, len)
        self.under_way = UnderWay() if under_way is None else under_way  # `Recipes` share it

    def keeping(self, tenant: str, ref: str, answer: bytes) -> asyncio.Task[bool]:
        """`keep`, begun now and left to run (a caller cancelled while it runs does not end
        it: await it shielded); a `get` of it here waits for it meanwhile."""
        self.cache.put((tenant, ref), answer)
        task = asyncio.get_running_loop().create_task(self._stored(tenant, ref, answer))
        self.under_way.add((ANSWER, tenant, ref), task)
        return task

    async def keep(self, tenant: str, ref: str, answer: bytes) -> bool:
        """Keep `answer` as recipe `ref`'s; whether it was (see the module docstring)."""
        self.cache.put((tenant, ref), answer)
        return await self._stored(tenant, ref, answer)

    async def _stored(self, tenant: str, ref: str, answer: bytes) -> bool:
        """`answer` written to the store, compressed; whether it was."""
        packed = zstandard.ZstdCompressor(level=_LEVEL).compress(answer)
        try:
            await self.store.put(
                tenant, _ACTION, [Put(keys.answer(tenant, ref), packed, self.store.ttl)]
            )
        except ToolrefError:
            return False
        return True

    async def get(self, tenant: str, ref: str) -> bytes | None:
        """The answer of recipe `ref` (None: none kept, or gone)."""
        found = self.cache.get((tenant, ref))
        if found is not None:
            return found
        await self.under_way.settled((ANSWER, tenant, ref))  # its write, when under way here
        packed = await self.store.get(keys.answer(tenant, ref), _READ)
        if packed is None:
            return None
        try:
            answer = zstandard.ZstdDecompressor().decompress(packed)
        except zstandard.ZstdError:
            return None
        self.cache.put((tenant, ref), answer)
        return answer
