"""Where summaries are kept: cached values, their single-flight locks and failure marks.

A summary is kept under its slot (`keys.summary`, or `keys.dialogue_summary` for a handoff's
dialogue) with the sliding lifetime of refs, read through the `Store` (counted for the
tenant's stored-bytes quota the first time it is read in a window) and written only when it
fits that quota (`keep`).

The mutex (as dogpile.cache's Redis backend holds one per key): a lock beside the value
(`keys.summary_lock`), taken with `SET NX PX` so that a crashed holder blocks the others only
until it expires (`lock_seconds`), and the value read again once it is held (`take`), so a
value kept between a request's read and its lock is not made a second time. The lock holds a
random token, which `take` gives its holder: the holder deletes the lock once the value is
kept (`keep`, the round trip after the write), or when it gave up without a failure
(`release`); when the computation failed it leaves `failed` under the lock's key for
`failure_seconds` instead (`fail`), so that whoever waits, and whoever asks until the mark
expires, falls back at once. Each only while the lock holds its token (compare and delete,
or set, in one script call on the lock's one key; plain commands on an engine that refuses
scripts): a holder whose lock expired while it computed leaves the lock another took since
(else it would free it for a third, and each would ask the model). A lock taken whose reply
was lost (the connection dropped after the SET NX, or on a cluster the GET after it failed)
is given back the same way before the error is raised. `wait` polls (value and
lock, one round trip each, backing off from 20 to 200 ms) until the value is there, the
holder failed or is gone, or the deadline passes. What to compute, and who waits how long,
is `toolref_server.registry.single_flight`'s and `toolref_server.registry.summary_cache`'s.

Locks and failure marks are not counted for the quota: a lock lives while its summary is
computed (at most `lock_seconds`, at most 16 per request in flight), a failure mark
`failure_seconds` after a model call failed (at most one per model call, which the tenant's
minute quota bounds); each is under 100 bytes. The lock and the mark are commands on the
engine directly, outside the `Store`'s breaker and slots (as the model-call counters are):
an engine error is a `StoreUnavailableError` naming the summary cache.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final

from redis.exceptions import RedisError, ResponseError

from toolref.wire.canonical import Ref
from toolref.wire.encoding import LONE_SURROGATE
from toolref.wire.errors import QuotaExceededError, StoreUnavailableError
from toolref_server.storage import keys
from toolref_server.storage.scripting import refuses_scripts
from toolref_server.storage.store import Put, Store

_FAILED: Final = b"failed"
_FIRST_POLL: Final = 0.02  # seconds
_LAST_POLL: Final = 0.2

# The lock's holder gives it back, or leaves its failure mark in its place (ARGV[2],
# expiring after ARGV[3] ms; also where the lock expired and nobody took it), only while it
# holds the holder's token (ARGV[1]). One key: one node, on a cluster too.
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_FAIL: Final = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one summary is kept: the tenant whose quota counts it, and its key."""

    tenant: str
    key: str

    def __str__(self) -> str:
        return self.key


class Outcome(enum.Enum):
    MADE = "made"  # the value is there (`Waited.text`)
    FAILED = "failed"  # the holder's computation failed moments ago
    FREE = "free"  # the holder is gone without a value: the lock may be taken
    LATE = "late"  # still held at the deadline


@dataclass(frozen=True, slots=True)
class Waited:
    outcome: Outcome
    text: str | None = None


class SummaryStore:
    """`store`: where summaries are kept and counted (its quota, if any, is the tenant's
    stored-bytes quota; its TTL is theirs)."""

    def __init__(self, store: Store, *, lock_seconds: float, failure_seconds: float) -> None:
        self.store = store
        self.lock_seconds = lock_seconds
        self.lock_ms = max(1, int(lock_seconds * 1000))
        self.failed_ms = max(1, int(failure_seconds * 1000))
        self._release = store.redis.register_script(_RELEASE)
        self._fail = store.redis.register_script(_FAIL)
        self.scripted = True  # until the engine says it refuses scripts

    @staticmethod
    def invocation(tenant: str, ref: Ref, summarizer_id: str) -> Slot:
        """The slot of `summarizer_id`'s summary of the invocation of `ref`."""
        return Slot(tenant, keys.summary(tenant, ref, summarizer_id))

    @staticmethod
    def dialogue(tenant: str, transcript: str, summarizer_id: str) -> Slot:
        """The slot of `summarizer_id`'s summary of a handoff dialogue's `transcript`."""
        return Slot(tenant, keys.dialogue_summary(tenant, transcript, summarizer_id))

    @property
    def ttl(self) -> int:
        """Seconds a summary or pin lives unread (the store's records' TTL)."""
        return self.store.ttl

    async def read(
        self, tenant: str, slots: Sequence[Slot], renew: Sequence[Slot] | None = None
    ) -> list[str | None]:
        """The summaries kept in `slots` (None where absent), each lifetime extended and
        counted (only those of `renew`, where given): one round trip (a GET per key on a
        cluster)."""
        if not slots:
            return []
        touched = None if renew is None else {s.key for s in renew}
        keys = [s.key for s in slots]
        values = await self.store.read_and_touch(tenant, keys, "summary", touched)
        return [None if value is None else _text(value) for value in values]

    async def keep(self, slot: Slot, token: str, text: str) -> bool:
        """Keep `text` in `slot` when it fits the tenant's stored-bytes quota (counted), and
        release the lock `token` holds in any case (the round trip after the write); False
        when it did not fit (answered, not kept)."""
        try:
            put = Put(slot.key, utf8(text), self.store.ttl)
            await self.store.put(slot.tenant, "summary", [put])
        except QuotaExceededError:
            self.store.metrics.summary_cache.labels("not-kept").inc()
            return False
        finally:
            await self.release(slot, token)
        return True

    async def pin(
        self, tenant: str, slots: Sequence[Slot], texts: Sequence[str]
    ) -> list[str | None]:
        """Keep each text in its slot unless one is there already (first writer wins, as a
        lock would have it), counted for `tenant`'s quota; the text each slot holds after:
        ours, or the one there. Over the quota: None for each (not kept: another replica,
        or this one later, would not find it, so the caller may not count on its bytes).
        Two round trips at most (the writes, then a read of the slots another wrote
        first)."""
        puts = [
            Put(s.key, utf8(t), self.store.ttl, keep=True)
            for s, t in zip(slots, texts, strict=True)
        ]
        try:
            written = await self.store.put(tenant, "summary", puts)
        except QuotaExceededError:
            self.store.metrics.summary_cache.labels("not-kept").inc(len(puts))
            return [None] * len(puts)
        lost = [i for i, done in enumerate(written) if not done]
        held = await self.read(tenant, [slots[i] for i in lost]) if lost else []
        found: list[str | None] = list(texts)
        for i, text in zip(lost, held, strict=True):
            found[i] = text  # the one there; None: gone meanwhile, and ours not kept
        return found

    # --- the mutex ----------------------------------------------------------------------------

    async def take(self, slot: Slot) -> tuple[str | None, str | None]:
        """Take `slot`'s lock, then read its value again (dogpile.cache's re-check once
        the mutex is held): a value kept since the caller's read missed it is the answer,
        not a second computation. (token, value): (token, None) the caller holds the lock
        and computes, and hands `token` to `keep`, `release` or `fail`; (None, None) another
        holds it (or its failure mark is there); a value, the lock given back if it was
        taken. One round trip on one node (the GET queued after the SET runs after it); on
        a cluster, where the two keys may sit on two nodes, the GET follows once the lock
        is held. An engine error once the SET is sent gives the lock back (if it was taken)
        before it is raised: else every ask would wait for it until it expired."""
        lock = keys.summary_lock(slot.key)
        token = uuid.uuid4().hex
        try:
            with self._engine():
                if self.store.cluster:
                    taken = await self.store.redis.set(lock, token, nx=True, px=self.lock_ms)
                    value = await self.store.redis.get(slot.key) if taken else None
                else:
                    pipe = self.store.redis.pipeline(transaction=False)
                    pipe.set(lock, token, nx=True, px=self.lock_ms)
                    pipe.get(slot.key)
                    taken, value = await pipe.execute()
        except BaseException:
            await self.release(slot, token)  # taken or not: only ours goes
            raise
        if value is None:
            return (token if taken else None), None
        if taken:
            await self.release(slot, token)
        return None, _text(value)

    async def release(self, slot: Slot, token: str) -> None:
        """Let the next ask take `slot`'s lock, if `token` still holds it (best effort: an
        unreachable engine lets it expire instead)."""
        with suppress(RedisError):
            await self._own(self._release, slot, [token])

    async def fail(self, slot: Slot, token: str) -> None:
        """Mark `slot`'s computation failed, in place of the lock `token` holds (or held,
        if it expired and nobody took it since), for `failure_seconds` (best effort, as
        `release`)."""
        with suppress(RedisError):
            await self._own(self._fail, slot, [token, _FAILED, self.failed_ms])

    async def _own(self, script: Any, slot: Slot, args: list[Any]) -> None:
        """`script` (`_RELEASE` or `_FAIL`) on `slot`'s lock, one round trip; on an engine
        that refuses scripts, its plain commands: a GET, then the DEL or SET when the token
        is there. Those are not atomic: a lock that expires between them and is taken by
        another at that moment is deleted or overwritten (a window of one round trip)."""
        lock = keys.summary_lock(slot.key)
        if self.scripted:
            try:
                await script(keys=[lock], args=args)
                return
            except ResponseError as exc:
                if not refuses_scripts(exc):
                    raise
                self.scripted = False
        held = await self.store.redis.get(lock)
        ours = held == args[0].encode()
        if script is self._release:
            if ours:
                await self.store.redis.delete(lock)
        elif ours or held is None:
            await self.store.redis.set(lock, args[1], px=args[2])

    async def wait(self, slot: Slot, deadline: float) -> Waited:
        """Poll until `slot`'s value is there, its holder failed or is gone, or the event
        loop's clock passes `deadline`: at most 5 round trips a second once backed off."""
        loop = asyncio.get_running_loop()
        lock = keys.summary_lock(slot.key)
        poll = _FIRST_POLL
        while True:
            with self._engine():
                pipe = self.store.redis.pipeline(transaction=False)
                pipe.get(slot.key)  # two GETs, not MGET: on a cluster they may sit in two slots
                pipe.get(lock)
                value, holder = await pipe.execute()
            if value is not None:
                # Written since this request missed it (within its wait), with its whole
                # lifetime: nothing to extend, so nothing to count.
                return Waited(Outcome.MADE, _text(value))
            if holder == _FAILED:
                return Waited(Outcome.FAILED)
            if holder is None:
                return Waited(Outcome.FREE)
            if loop.time() >= deadline:
                return Waited(Outcome.LATE)
            await asyncio.sleep(poll)
            poll = min(poll * 1.5, _LAST_POLL)

    @contextmanager
    def _engine(self) -> Iterator[None]:
        with engine_errors(self.store):
            yield


@contextmanager
def engine_errors(store: Store) -> Iterator[None]:
    """Engine errors of the summary cache's own commands (outside the `Store`'s guard) as
    `StoreUnavailableError`, counted as failed `summary` operations."""
    try:
        yield
    except RedisError as exc:
        store.metrics.store_errors.labels("summary").inc()
        raise StoreUnavailableError(
            f"the summary cache (Redis) is unreachable ({type(exc).__name__}); retry after "
            f"{store.retry_after}s, or hydrate in full mode",
            retry_after=store.retry_after,
        ) from None


def well_formed(text: str) -> str:
    """`text` with each lone UTF-16 surrogate (a JSON `"\\ud800"` without its pair, which a
    model may send, cutting an emoji's escape in two) as U+FFFD: text UTF-8 carries, so it
    is kept and answered. Same length; linear in the text, at C speed when there is none."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return LONE_SURROGATE.sub("\ufffd", text)
    return text


def utf8(text: str) -> bytes:
    """`text` as UTF-8, a lone surrogate as U+FFFD (`well_formed`): never an error."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return well_formed(text).encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
