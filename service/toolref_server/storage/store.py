"""Redis access: tenant-namespaced records, batched reads, sliding lifetimes.

Every method is one round trip to Redis whatever the batch size: a pipeline (a
`commands.Batch` on one node), reads on one node one script call that gets and touches the
batch (without scripting an MGET plus EXPIREs; on a cluster a GET per key, one pipeline per
node: `slots`). Redis failures become `StoreUnavailableError` (503, Retry-After).

A circuit breaker sits in front: after `failure_threshold` failures in a row, requests fail
fast (503) for `retry_after` seconds, not each waiting out a dead engine's timeout.

At most `slots` operations (the pool's size) go to the engine at once; the others wait
`slot_wait` seconds at most, and ask the breaker once they hold one. An operation records
its outcome before it hands its slot on (a request that waited while the engine froze fails
fast). The other stores of this package keep values through `put` and read them through
`get` and `read_and_touch` (each value kept counted for the stored-bytes quota; the summary
locks and model-call counters are commands of their own). Keys are spelled in `keys`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError, ResponseError

from toolref.asgi.workers import Workers
from toolref.kit.breaker import BreakerState, CircuitBreaker
from toolref.wire.canonical import Ref
from toolref.wire.errors import DecompressedTooLargeError, StoreUnavailableError
from toolref_server.metrics import Metrics
from toolref_server.storage import engine_mode, outage, record
from toolref_server.storage.commands import Batch
from toolref_server.storage.keys import record as record_key
from toolref_server.storage.quotas import StoredBytes
from toolref_server.storage.record import Record
from toolref_server.storage.scripting import READ_AND_TOUCH, READ_TOUCH_AND_COUNT, refuses_scripts
from toolref_server.storage.slots import queue_reads, read_values
from toolref_server.storage.verifier import Verifier

log = logging.getLogger(__name__)

StoreClient = Redis | RedisCluster


@dataclass(frozen=True, slots=True)
class NewRecord:
    ref: Ref
    digest: bytes
    data: bytes


@dataclass(frozen=True, slots=True)
class Registered:
    new: bool
    stored_digest: bytes | None  # digest of the record now under the key; None if it vanished


@dataclass(frozen=True, slots=True)
class Put:
    """One value for `Store.put`, to live `ttl` seconds. `keep`: written only where the key
    is absent (SET NX), an existing value's lifetime extended to `ttl` (EXPIRE GT)."""

    key: str
    value: bytes
    ttl: int
    keep: bool = False


class Store:
    def __init__(
        self,
        redis: StoreClient,
        ttl_seconds: int,
        retry_after: int = 1,
        *,
        failure_threshold: int = 3,
        metrics: Metrics | None = None,
        slots: int = 64,
        slot_wait: float = 2.0,
        workers: Workers | None = None,
        quota: StoredBytes | None = None,
        verifier: Verifier | None = None,
        batches: bool = True,
    ) -> None:
        self.redis = redis
        self.cluster = isinstance(redis, RedisCluster)
        # `pipeline`: a `commands.Batch` on one node; False: the client's own pipelines.
        self._batches = batches and not self.cluster
        # One node: GET and EXPIRE of a batch as one script call (a cluster: `slots`).
        self._read = None if self.cluster else redis.register_script(READ_AND_TOUCH)
        # The stored-bytes quota, when there is one: every write and read counts.
        self.quota = quota if quota is not None and quota.enabled else None
        self._read_counted = None
        if self.quota is not None and not self.cluster:
            self._read_counted = redis.register_script(READ_TOUCH_AND_COUNT)
        self.ttl = ttl_seconds
        self.retry_after = retry_after
        self.breaker = CircuitBreaker(failure_threshold, reset_timeout=retry_after)
        self.slots = slots
        self.slot_wait = slot_wait
        self._slots = asyncio.Semaphore(slots)
        self.metrics = metrics or Metrics()
        self.metrics.watch_breaker(lambda: self.breaker.state.value)
        self.workers = workers
        # `is not None`: an empty Verifier is falsy (it has a length): the app's at start.
        self.verifier = verifier if verifier is not None else Verifier(100_000)
        # What the engine said when it last refused the credentials (`outage.refused`).
        self.refused: str | None = None

    @staticmethod
    def key(tenant: str, ref: Ref) -> str:
        """The key of the record of `ref` (`keys.record`)."""
        return record_key(tenant, ref)

    @property
    def sound(self) -> bool:
        """No failure since the last call that reached the engine, and no quota to refuse a
        write: one may be left to finish after the answer (`apply_edit(later=True)`; the
        gateway's, `outage=True`, also while this is False for a failure)."""
        return self.breaker.sound and self.quota is None

    @asynccontextmanager
    async def guard(self, action: str) -> AsyncIterator[None]:
        # Open: refuse before queueing for a slot (half-open: asked once one is held).
        if self.breaker.state is BreakerState.OPEN:
            raise self._skipped()
        try:
            async with asyncio.timeout(self.slot_wait):
                await self._slots.acquire()
        except TimeoutError:
            self.breaker.failure()  # as redis-py's own pool counts a wait for a connection
            raise self._unavailable(
                action, f"all {self.slots} connections stayed busy for {self.slot_wait}s"
            ) from None
        try:
            # The breaker may have opened while this request waited for its slot.
            if not self.breaker.allow():
                raise self._skipped()
            try:
                yield
            except ResponseError as exc:
                self.breaker.success()  # the engine answered (OOM, say): it is reachable
                raise self._unavailable(action, type(exc).__name__, exc) from None
            except RedisError as exc:
                self.breaker.failure()
                self.refused = outage.refused(exc)  # the last failure's: `_skipped` says it
                raise self._unavailable(action, type(exc).__name__, exc) from None
            self.breaker.success()
        finally:
            self._slots.release()  # after the outcome is recorded: the next holder sees it

    def _skipped(self) -> StoreUnavailableError:
        wait = max(1, math.ceil(self.breaker.retry_in()))
        return outage.skipped(self.breaker.failure_threshold, wait, self.refused)

    def _unavailable(
        self, action: str, cause: str, exc: Exception | None = None
    ) -> StoreUnavailableError:
        log.warning("store %s failed: %s%s", action, cause, f": {exc}" if exc else "")
        self.metrics.store_errors.labels(action).inc()
        return outage.unavailable(cause, self.retry_after, outage.refused(exc))

    async def register(self, tenant: str, records: Sequence[NewRecord]) -> list[Registered]:
        """Store records that are absent; extend the lifetime of those present.

        Never overwrites: SET NX. The digest read back (32 bytes at a fixed offset) tells a
        record written just now or earlier from a different invocation with the same ref.
        """
        outcomes: list[Registered | None] = [None] * len(records)
        pending = list(range(len(records)))
        cost = await self.cost_of_writing(
            tenant, [self.key(tenant, r.ref) for r in records], [len(r.data) for r in records]
        )
        # A key that expires between SET NX and GETRANGE reads back empty: write it again.
        for _ in range(2):
            if not pending:
                break
            async with self.guard("register"):
                pipe = self.writes()
                for i in pending:
                    key = self.key(tenant, records[i].ref)
                    pipe.set(key, records[i].data, nx=True, ex=self.ttl)
                    pipe.expire(key, self.ttl)
                    pipe.getrange(key, record.DIGEST_START, record.DIGEST_END - 1)
                self.charge(pipe, tenant, cost)  # after the replies read below
                cost = 0
                replies: list[Any] = await pipe.execute()
            retry = []
            for n, i in enumerate(pending):
                stored = replies[3 * n + 2]
                if stored:
                    outcomes[i] = Registered(bool(replies[3 * n]), stored)
                else:
                    retry.append(i)
            pending = retry
        done = [o if o is not None else Registered(False, None) for o in outcomes]
        created = sum(o.new for o in done)
        self.metrics.registered.labels("true").inc(created)
        self.metrics.registered.labels("false").inc(len(done) - created)
        return done

    async def touch(self, tenant: str, refs: Sequence[Ref]) -> list[bool]:
        """Extend the lifetime of each ref; True where it is present."""
        if not refs:
            return []
        counted = self.quota is not None
        async with self.guard("findMissing"):
            pipe = self.pipeline()
            for ref in refs:
                key = self.key(tenant, ref)
                if counted:
                    pipe.pttl(key)
                    pipe.strlen(key)
                pipe.expire(key, self.ttl)
            replies: list[Any] = await pipe.execute()
        if counted:
            lifetimes, sizes, replies = replies[0::3], replies[1::3], replies[2::3]
            await self._count(tenant, sizes, lifetimes)
        present = [bool(reply) for reply in replies]
        self.metrics.refs(present)
        return present

    async def fetch(
        self, tenant: str, refs: Sequence[Ref], *, limit: int | None = None
    ) -> list[Record | None]:
        """Records for refs (None where absent), extending the lifetime of those read.
        `limit`: the most bytes they may inflate to together, summed from their zstd frames
        before any is inflated (413 past it)."""
        if not refs:
            return []
        keys = [self.key(tenant, ref) for ref in refs]
        if self._read is not None:
            values: list[Any] | None = None
            async with self.guard("resolve"):
                try:
                    if self._read_counted is not None and self.quota is not None:
                        now = self.quota.clock()
                        counter, _ = self.quota.counters(tenant, now)
                        args = [self.ttl, self.quota.threshold(now), self.quota.counter_lifetime]
                        values = await self._read_counted(keys=[*keys, counter], args=args)
                    else:
                        values = await self._read(keys=keys, args=[self.ttl])
                except ResponseError as exc:
                    if not refuses_scripts(exc):
                        raise
                    # An engine that refuses scripts: MGET and EXPIREs then.
                    self._read = self._read_counted = None
            if values is None:
                values = await self.read_and_touch(tenant, keys, "resolve")
        else:
            values = await self.read_and_touch(tenant, keys, "resolve")
        return await self._verified(tenant, refs, values, limit)

    async def read_and_touch(
        self, tenant: str, keys: Sequence[str], action: str, touched: Collection[str] | None = None
    ) -> list[Any]:
        """The values under `keys` (None where absent), each lifetime extended (of `touched`
        only, where given: an EXPIRE is a command each): one round trip, a GET per key on a
        cluster (`slots`; one more to count the extended for the stored-bytes quota, the
        first time they are read in its window: each key once)."""
        unique = list(dict.fromkeys(keys))  # PTTLs before EXPIREs: a copy would count again
        extended = unique if touched is None else [k for k in unique if k in touched]
        async with self.guard(action):
            pipe = self.pipeline()
            reads = queue_reads(pipe, unique, self.cluster)
            if self.quota is not None:
                for key in extended:
                    pipe.pttl(key)
            for key in extended:
                pipe.expire(key, self.ttl)
            replies: list[Any] = await pipe.execute()
        values = read_values(replies, self.cluster, len(unique))
        if self.quota is not None and extended:
            lifetimes = replies[reads : reads + len(extended)]
            size = {k: len(v) if v else 0 for k, v in zip(unique, values, strict=True)}
            await self._count(tenant, [size[k] for k in extended], lifetimes)
        return list(map(dict(zip(unique, values, strict=True)).__getitem__, keys))

    async def get_many(self, keys: Sequence[str], action: str) -> list[bytes | None]:
        """The values under `keys` (None where absent), lifetimes left as they are: one
        round trip, a GET per key on a cluster (`slots`); linear in the keys."""
        if not keys:
            return []
        async with self.guard(action):
            pipe = self.pipeline()
            queue_reads(pipe, keys, self.cluster)
            replies: list[Any] = await pipe.execute()
        return read_values(replies, self.cluster, len(keys))

    async def get(self, key: str, action: str) -> bytes | None:
        """The value under `key` (None where absent), its lifetime left as it is. One GET."""
        async with self.guard(action):
            value = await self.redis.get(key)
        return value if isinstance(value, bytes) else None

    async def put(
        self,
        tenant: str,
        action: str,
        puts: Sequence[Put],
        *,
        shorten: Sequence[tuple[str, int]] = (),
        delete: Sequence[str] = (),
        extend: Sequence[tuple[str, int]] = (),
    ) -> list[bool]:
        """Write `puts` for `tenant`, counted for its stored-bytes quota: refused whole
        (`QuotaExceededError`) before anything is written when they do not fit. With them,
        in the same round trip: each (key, seconds) of `shorten` gets at most that lifetime
        left (EXPIRE LT), each of `extend` at least that lifetime (EXPIRE GT; neither revives
        a key; counted as a read is, never refused), and the keys of `delete` go. Two round
        trips (the quota's read, the writes), one with no quota; linear in the keys. Returns
        whether each put was written (False: a `keep` put whose key was there)."""
        cost = await self.cost_of_writing(
            tenant,
            [p.key for p in puts],
            [len(p.value) for p in puts],
            extend,
            [not p.keep for p in puts],
        )
        async with self.guard(action):
            pipe = self.writes()
            for p in puts:
                pipe.set(p.key, p.value, nx=p.keep, ex=p.ttl)
                if p.keep:
                    pipe.expire(p.key, p.ttl, gt=True)
            for key, seconds in shorten:
                pipe.expire(key, seconds, lt=True)
            for key, seconds in extend:
                pipe.expire(key, seconds, gt=True)
            self.charge(pipe, tenant, cost)
            for key in delete:
                pipe.delete(key)
            replies: list[Any] = await pipe.execute()
        written: list[bool] = []
        at = 0
        for p in puts:
            written.append(bool(replies[at]))
            at += 2 if p.keep else 1
        return written

    def writes(self) -> Any:
        """A pipeline for writes counted for the quota: with a quota, on one node, a
        transaction (MULTI), so that a failure part-way (the engine out of memory, the
        connection lost) leaves neither a value written uncounted nor a count of bytes not
        written. A cluster's keys sit in many slots, where no transaction reaches: there a
        failure part-way may leave some of the writes done, counted or not (the count is
        off until its windows end, two TTLs at most). With no quota, no count to keep true,
        and a recipe's node written last (a part-way failure: a 409 and a resend), so no
        transaction: its queued replies would cost every turn's keep."""
        if self.quota is not None and not self.cluster:
            return self.redis.pipeline(transaction=True)
        return self.pipeline()

    def pipeline(self) -> Any:
        """Commands for one round trip, no transaction: a `commands.Batch` on one node (half
        redis-py's CPU), else the client's pipeline (a cluster's routes them by slot)."""
        if self._batches and isinstance(self.redis, Redis):
            return Batch(self.redis)
        return self.redis.pipeline(transaction=False)

    # --- the stored-bytes quota (toolref_server.storage.quotas) ----------------------------------

    async def cost_of_writing(
        self,
        tenant: str,
        keys: Sequence[str],
        sizes: Sequence[int],
        extended: Sequence[tuple[str, int]] = (),
        replacing: Sequence[bool] = (),
    ) -> int:
        """The bytes writing `sizes` under `keys` (each key once; `replacing`: each write a
        SET over what is there, which counts what it grows a key by, else a SET NX) and
        extending each (key, seconds) of `extended` add to `tenant`'s count (0 with no
        quota); `QuotaExceededError` when the writes do not fit (an extension is counted
        as a read is: the first time in a window, never refused). One round trip."""
        if self.quota is None or not (keys or extended):
            return 0
        written: dict[str, tuple[int, bool]] = {}
        over = list(replacing) or [False] * len(keys)
        for key, size, replaces in zip(keys, sizes, over, strict=True):
            had = written.get(key)  # a key written twice is stored once: the larger
            written[key] = (max(size, had[0]), replaces or had[1]) if had else (size, replaces)
        kept: dict[str, int] = {}
        for key, seconds in extended:
            if key not in written:
                kept[key] = max(seconds, kept.get(key, 0))
        now = self.quota.clock()
        current, previous = self.quota.counters(tenant, now)
        async with self.guard("quota"):
            pipe = self.pipeline()
            pipe.get(current)
            pipe.get(previous)
            for key in [*written, *kept]:
                pipe.pttl(key)
                pipe.strlen(key)
            replies: list[Any] = await pipe.execute()
        used = int(replies[0] or 0) + int(replies[1] or 0)
        at = 2 + 2 * len(written)
        lifetimes, stored = replies[2:at:2], replies[3:at:2]
        sizes = [size for size, _ in written.values()]
        pairs = zip(stored, written.values(), strict=True)
        before = [there if replaces else None for there, (_, replaces) in pairs]
        cost = self.quota.cost(sizes, lifetimes, now, before)
        self.quota.check(tenant, used, cost, now)
        kept_stored = replies[at + 1 :: 2]
        return cost + self.quota.extended(kept_stored, replies[at::2], list(kept.values()), now)

    def charge(self, pipe: Any, tenant: str, cost: int) -> None:
        """Queue on `pipe` the counting of `cost` bytes for `tenant`."""
        if self.quota is None or cost <= 0:
            return
        current, _ = self.quota.counters(tenant, self.quota.clock())
        pipe.incrby(current, cost)
        pipe.expire(current, self.quota.counter_lifetime)

    async def _count(self, tenant: str, sizes: Sequence[int], lifetimes: Sequence[Any]) -> None:
        """Count keys just read (their lifetimes read before they were extended)."""
        if self.quota is None:
            return
        cost = self.quota.cost(sizes, lifetimes, self.quota.clock())
        if cost:
            async with self.guard("quota"):
                pipe = self.pipeline()
                self.charge(pipe, tenant, cost)
                await pipe.execute()

    async def _verified(
        self, tenant: str, refs: Sequence[Ref], values: Sequence[Any], limit: int | None = None
    ) -> list[Record | None]:
        """The records read, each checked against its ref (`record.verified`: decoded, its
        content's SHA-256 recomputed, or the same bytes known sound: `Verifier`): linear in
        the bytes read, in the worker threads
        when they are many. A corrupt record is never served: it counts as missing, so the
        client resends the payload, and it is deleted, so that resend stores it again."""
        size = sum(record.work_size(value) for value in values if value is not None)
        if limit is not None and size > limit:
            raise DecompressedTooLargeError(
                f"the {len(refs)} refs named hold {size} bytes once inflated, over the limit "
                f"of {limit} on what one request reads (TOOLREF_MAX_DECOMPRESSED_BYTES); name "
                "fewer refs in one request",
                limit=limit,
            )
        if self.workers is None:
            records = _verified_all(self.verifier, refs, values)
        else:
            records = await self.workers.run(size, _verified_all, self.verifier, refs, values)
        corrupt = [
            ref
            for ref, value, rec in zip(refs, values, records, strict=True)
            if value is not None and rec is None
        ]
        if corrupt:
            self.metrics.corrupt.inc(len(corrupt))
            log.warning(
                "%d stored record(s) do not hold what their ref names (first: %s); deleted, "
                "so the next registration stores them again",
                len(corrupt),
                corrupt[0],
            )
            with suppress(StoreUnavailableError):  # unserved either way; the next read retries
                async with self.guard("resolve"):
                    await self.redis.delete(*[self.key(tenant, ref) for ref in corrupt])
        self.metrics.refs([rec is not None for rec in records])
        return records

    async def misrouted(self) -> str | None:
        """Why this engine cannot serve as configured (`engine_mode.misrouted`), or None."""
        return await engine_mode.misrouted(self.redis, self.cluster)

    async def ping(self, *, probe: bool = True) -> bool:
        """Does the engine answer? Asked past the breaker, whose state it then sets (not
        with `probe=False`: the start's check): a readiness probe that succeeds lets
        traffic back in at once. `refused`: what the engine said if it refused the
        credentials (a wrong password, NOPERM: `outage`), None if it did not."""
        try:
            answered = bool(await self.redis.ping())
        except RedisError as exc:
            self.refused = outage.refused(exc)
            if probe:
                self.breaker.failure()
            return False
        self.refused = None
        if probe:
            self.breaker.success()
        return answered


def _verified_all(
    verifier: Verifier, refs: Sequence[Ref], values: Sequence[Any]
) -> list[Record | None]:
    return [
        None if value is None else verifier(value, ref)
        for ref, value in zip(refs, values, strict=True)
    ]
