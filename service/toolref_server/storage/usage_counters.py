"""Gateway usage per tenant, upstream and minute, in the engine (`keys.usage`): what the
savings page shows over the last hour and day, added up by every worker and replica.

One hash per tenant and minute, `<upstream>:<field>` -> count (`toolref_server.usage.FIELDS`),
and `@<writer>` -> the number of the last batch that worker added (`keys.usage_writer`),
living a day and two minutes from its last write. Each worker adds what it counted every
`TOOLREF_SAMPLE_SECONDS` (`flush`: one pipelined round trip, one script call per tenant and
minute counted, two when a batch before failed). Exactly once: the script adds a batch to a
hash only when the hash's mark for the writer is below the batch's number, and sets the mark
and the lifetime in the same step, so a batch sent again after a failure, a timeout or a
cancel (the engine may have run it) is added once, and no hash is left without a lifetime.
An engine without scripting (EVAL unknown, refused by the ACL or turned off) gets plain
`HINCRBY`s instead, from then on (logged once): at least once there (a batch the engine ran
before its reply was lost is added again). Reading minutes is one `HGETALL` per
tenant and minute (`read`: at most tenants x 1440 replies of at most upstreams x 6 fields
and a mark per worker, pipelined). Not counted in a tenant's stored-bytes quota: the
service's own accounting, bounded as above (as the model-call and quota counters). Engine
errors are `StoreUnavailableError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from redis.exceptions import RedisError, ResponseError

from toolref.wire.errors import StoreUnavailableError
from toolref_server.storage import keys
from toolref_server.storage.scripting import refuses_scripts
from toolref_server.storage.store import Store
from toolref_server.usage import FIELDS, KEEP_MINUTES, MINUTE, Batch, Counts, Pending, Slot

log = logging.getLogger(__name__)

LIFETIME: Final = (KEEP_MINUTES + 2) * MINUTE  # seconds: a day, and the minute being written

# KEYS[1]: a minute's usage hash. ARGV: the writer's mark field, the batch's number, the
# lifetime (s), then field and count pairs. A batch is added when the writer's mark is below
# its number (a writer's batches reach a hash in order: the next is taken once this one is
# written), then the mark moves to it.
_ADD_ONCE: Final = """
local mark = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if mark < tonumber(ARGV[2]) then
  for i = 4, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 0
"""


class UsageCounters:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.scripted = True  # until the engine says it has no scripting

    async def write(self, writer: str, batch: Batch) -> None:
        """Add `batch` of `writer` (`toolref_server.usage.Pending.batch`), once however often
        it is sent. One round trip."""
        per_key: dict[str, list[str | int]] = {}
        for slot, counts in batch.counts.items():
            fields = per_key.setdefault(keys.usage(slot.tenant, slot.minute), [])
            for name, value in counts.items():
                fields += [keys.usage_field(slot.upstream, name), value]
        if not per_key:
            return
        with _engine_errors(self.store):
            if self.scripted:
                pipe = self.store.redis.pipeline(transaction=False)
                mark = keys.usage_writer(writer)
                for key, fields in per_key.items():
                    pipe.eval(_ADD_ONCE, 1, key, mark, batch.number, LIFETIME, *fields)
                try:
                    replies: list[Any] = await pipe.execute(raise_on_error=False)
                except ResponseError as exc:
                    replies = [exc]
                errors = [reply for reply in replies if isinstance(reply, ResponseError)]
                if not errors:
                    return
                if not all(refuses_scripts(error) for error in errors):
                    raise errors[0]
                # Nothing was added: every call was refused, as every one will be.
                self.scripted = False
                log.warning(
                    "the engine refuses scripts (%s): usage is added with plain HINCRBY "
                    "from now on (at least once, not exactly once)",
                    errors[0],
                )
            pipe = self.store.redis.pipeline(transaction=False)
            for key, fields in per_key.items():
                for at in range(0, len(fields), 2):
                    pipe.hincrby(key, str(fields[at]), int(fields[at + 1]))
                pipe.expire(key, LIFETIME)
            await pipe.execute()

    async def flush(self, pending: Pending) -> None:
        """What a worker counted and has not added yet, added: the batch a failed flush
        left first (sent again as it was), then what was counted since. `pending` lets go of
        a batch only once it is written, so a failure (`StoreUnavailableError`), a timeout or
        a cancel keeps it for the next flush; flushes may run at once (the sampler and a
        savings request), each batch is added once."""
        for _ in range(2):
            batch = pending.batch()
            if batch is None:
                return
            await self.write(pending.writer, batch)
            pending.written(batch)

    async def read(
        self, tenants: Iterable[str], now_minute: int, minutes: int
    ) -> dict[Slot, Counts]:
        """What `tenants` used in each of the last `minutes` minutes (at most a day; the
        current one included), per minute and upstream; minutes without use are absent.
        One round trip. `toolref_server.usage.window` adds a window up."""
        span = min(minutes, KEEP_MINUTES)
        asked = [(t, now_minute - back) for t in sorted(set(tenants)) for back in range(span)]
        with _engine_errors(self.store):
            pipe = self.store.redis.pipeline(transaction=False)
            for tenant, minute in asked:
                pipe.hgetall(keys.usage(tenant, minute))
            replies: list[Any] = await pipe.execute() if asked else []
        found: dict[Slot, Counts] = {}
        for (tenant, minute), reply in zip(asked, replies, strict=True):
            if reply:
                for upstream, counts in _counts(reply).items():
                    found[Slot(minute, tenant, upstream)] = counts
        return found


def _counts(reply: Mapping[bytes | str, bytes | str]) -> dict[str, Counts]:
    """One minute's hash as {upstream: Counts}; fields this version does not know are left
    out."""
    values: dict[str, dict[str, int]] = {}
    for raw_field, raw_value in reply.items():
        upstream, name = keys.usage_fields(raw_field)
        if name in FIELDS:
            values.setdefault(upstream, {})[name] = int(raw_value)
    return {upstream: Counts(**fields) for upstream, fields in values.items()}


@contextlib.contextmanager
def _engine_errors(store: Store) -> Iterator[None]:
    try:
        yield
    except RedisError as exc:
        store.metrics.store_errors.labels("usage").inc()
        raise StoreUnavailableError(
            f"the usage counters (Redis) are unreachable ({type(exc).__name__}); retry after "
            f"{store.retry_after}s",
            retry_after=store.retry_after,
        ) from None
