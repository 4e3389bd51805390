"""Gateway usage per tenant, upstream and minute, in the engine (`keys.usage`): what the
savings page shows over the last hour and day, added up by every worker and replica.

One hash per tenant and minute, `<upstream>:<field>` -> count (`toolref_server.usage.FIELDS`),
living a day and two minutes from its last write. Each worker adds what it counted every
`TOOLREF_SAMPLE_SECONDS` (`add`: one pipelined round trip, a few commands per tenant,
upstream and minute counted); reading minutes is one `HGETALL` per tenant and minute
(`read`: at most tenants x 1440 replies of at most upstreams x 4 fields, pipelined). Not
counted in a tenant's stored-bytes quota: the service's own accounting, bounded as above
(as the model-call and quota counters). Engine errors are `StoreUnavailableError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from redis.exceptions import RedisError

from toolref.wire.errors import StoreUnavailableError
from toolref_server.storage import keys
from toolref_server.storage.store import Store
from toolref_server.usage import FIELDS, KEEP_MINUTES, MINUTE, Counts, Pending, Slot

LIFETIME: Final = (KEEP_MINUTES + 2) * MINUTE  # seconds: a day, and the minute being written


class UsageCounters:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def add(self, drained: Mapping[Slot, Counts]) -> None:
        """Add what workers counted (`toolref_server.usage.Pending.drain`). One round trip."""
        if not drained:
            return
        with _engine_errors(self.store):
            pipe = self.store.redis.pipeline(transaction=False)
            for slot, counts in drained.items():
                key = keys.usage(slot.tenant, slot.minute)
                for name, value in counts.items():
                    pipe.hincrby(key, keys.usage_field(slot.upstream, name), value)
                pipe.expire(key, LIFETIME)
            await pipe.execute()

    async def flush(self, pending: Pending) -> None:
        """What a worker counted and has not added yet, added (put back if the engine
        fails, then `StoreUnavailableError`)."""
        drained = pending.drain()
        try:
            await self.add(drained)
        except StoreUnavailableError:
            pending.restore(drained)
            raise

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
