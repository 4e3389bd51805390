"""Per-tenant quotas: requests per second, and bytes kept in the store. Both are answered 429
`quota-exceeded` with `Retry-After`, naming the quota, its value and the fix.

**Requests per second** (`TOOLREF_TENANT_REQUESTS_PER_SECOND`): a token bucket per tenant,
refilled at that rate and holding one second's worth, in each worker process (so with N
workers a tenant may reach N times the rate). It is taken once the key is known, before the
body is read.

**Stored bytes** (`TOOLREF_TENANT_MAX_BYTES`): what a tenant's records, edited requests'
recipes (nodes, chunks, pieces) and summaries (of invocations and of handoff dialogues) take
in the store, as stored (compressed). Every key lives `TTL` seconds after it was last
written or read, so the bytes a tenant keeps at time t are those it wrote or read since
t - TTL. Time is cut into windows of one TTL, and a counter per tenant and window
(`keys.stored_bytes`) adds each key's size the first time the key is written or read in
that window (a key's remaining lifetime, read before it is extended, tells whether it was
last used before the window began), and what a write over it grows it by after that; a
key whose lifetime is only extended (keeping an edited request's recipe extends the nodes,
chunks and pieces it needs) counts as a read does. A key alive at t was used in t's window
or the one before, so the current and the previous counters together are never below what
the tenant keeps. Above it they hold at most: the keys used in both windows once more (each
window counts them), the keys used in the previous one and gone since, and what shrinking
overwrites and deletes gave up in the two windows. Nothing is given back when a write
shrinks a key or a key is deleted (sizes are read before the write: two shrinks at once
would both give the same bytes back, and a tenant could drive its count down), so a later
write counts those bytes again: a key written 5,000 bytes, then 1, then 5,000, ten times
in a window, counts 54,990 for 5,000 kept, and one deleted then written again counts
twice. Kept answers do so: `Answers.keep` writes a recipe's answer over each time its turn
is made again, `Recipes.keep` deletes its base's answer, which a resent base writes back.
The count falls when its window ends (at most two TTLs later). A write whose new bytes
would take that sum past the quota is refused before anything is written; reads and
extensions are never refused (they only count). A summary past the quota is answered and
not kept (`toolref_server.storage.summary_store`): making it is a read.

What else a tenant makes the service store is bounded without counting: summary locks
(one per summary being made, deleted when it is, under 100 bytes) and failure marks (one per
failed model call, which `TOOLREF_LLM_CALLS_PER_TENANT_MINUTE` bounds, for
`TOOLREF_LLM_FAILURE_SECONDS`), the model-call counters (`counters`, two
alive) and these counters (three alive). `cache import` is the operator's, not a tenant's:
what it writes counts when it is next read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from toolref.wire.errors import QuotaExceededError
from toolref_server.storage import keys

RATE: Final = "requestsPerSecond"
STORED: Final = "storedBytes"


class RequestRate:
    """A token bucket per tenant: `rate` requests per second, bursts of one second's worth;
    a rate of 0 admits everything."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = max(rate, 1.0)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, when)

    def admit(self, tenant: str) -> None:
        """Take a token for one request of `tenant`, or raise `QuotaExceededError`."""
        if self.rate <= 0:
            return
        now = self.clock()
        tokens, then = self._buckets.get(tenant, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1:
            self._buckets[tenant] = (tokens, now)
            wait = max(1, math.ceil((1 - tokens) / self.rate))
            raise QuotaExceededError(
                f"tenant {tenant!r} sent more than {self.rate:g} requests per second, its "
                "quota (TOOLREF_TENANT_REQUESTS_PER_SECOND, counted per server process); "
                f"retry after {wait}s and send fewer, larger requests (batches), or send "
                "full payloads meanwhile",
                retry_after=wait,
                quota=RATE,
                limit=self.rate,
            )
        self._buckets[tenant] = (tokens - 1, now)


class StoredBytes:
    """The stored-bytes quota's arithmetic (the store runs the commands); `limit` 0 is no
    quota."""

    def __init__(self, limit: int, ttl: int, clock: Callable[[], float] = time.time) -> None:
        self.limit = limit
        self.ttl = ttl
        self.clock = clock

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    def counters(self, tenant: str, now: float) -> tuple[str, str]:
        """The keys of `tenant`'s counters for the window of `now` and the one before."""
        window = int(now // self.ttl)
        return keys.stored_bytes(tenant, window), keys.stored_bytes(tenant, window - 1)

    @property
    def counter_lifetime(self) -> int:
        """A counter is read until the end of the window after its own."""
        return 2 * self.ttl + 60

    def threshold(self, now: float) -> int:
        """A key whose remaining lifetime (ms) is below this was last used before the
        window of `now` began (keys without a lifetime, -1, and absent ones, -2, are below
        too): it was used `ttl - remaining` ago, longer ago than the window began."""
        return math.floor((self.ttl - now % self.ttl) * 1000)

    def cost(
        self,
        sizes: Sequence[int],
        remaining: Sequence[Any],
        now: float,
        replaced: Sequence[Any] | None = None,
    ) -> int:
        """Bytes to count for keys of `sizes` about to be written or read, given their
        remaining lifetimes in ms (PTTL replies) before this use. `replaced`: for writes
        over what is there (SET, not SET NX), the sizes there now (STRLEN replies): a key
        counted in this window already counts what it grows by, so that writing a key
        small and then again large counts the large value. A shrink counts 0 and gives
        nothing back (the sizes were read before the write: concurrent shrinks would give
        the same bytes back twice), so writing large, small, large again counts the growth
        twice: the count exceeds what is kept by what shrinks (and deletes) gave up."""
        threshold = self.threshold(now)
        before = replaced if replaced is not None else [None] * len(sizes)
        return sum(
            size if int(left) < threshold else max(0, size - int(old))
            for size, left, old in zip(sizes, remaining, before, strict=True)
            if size and (int(left) < threshold or old is not None)
        )

    def extended(
        self, sizes: Sequence[int], remaining: Sequence[Any], seconds: Sequence[int], now: float
    ) -> int:
        """Bytes to count for keys of `sizes` whose lifetimes are about to be extended to at
        least `seconds` (EXPIRE GT), given their remaining lifetimes in ms before: those the
        extension carries past the end of the window their end was in. A key alive was
        counted in the window its end is in or the one before, which covers it up to there
        (a recipe's node, extended to the end it has already: `Recipes.keep`); a key extended
        to the TTL counts when last used before this window began, as `cost` says. An absent
        key (-2) is not revived, and one without a lifetime (-1) is not extended."""
        return sum(
            int(size)
            for size, left, wanted in zip(sizes, remaining, seconds, strict=True)
            if size
            and 0 <= int(left) < wanted * 1000
            and (now + int(left) / 1000) // self.ttl < (now + wanted) // self.ttl
        )

    def check(self, tenant: str, used: int, adding: int, now: float) -> None:
        """Refuse a write of `adding` counted bytes when the tenant's `used` bytes leave no
        room for them."""
        if not adding or used + adding <= self.limit:
            return
        wait = max(1, math.ceil(self.ttl - now % self.ttl))
        raise QuotaExceededError(
            f"tenant {tenant!r} keeps {used} bytes in the registry and this request would add "
            f"{adding}, over its quota of {self.limit} bytes (TOOLREF_TENANT_MAX_BYTES); refs "
            "not used for a while expire and free room (the count falls at the latest in "
            f"{wait}s): send full payloads meanwhile, or ask the operator for a larger quota",
            retry_after=wait,
            quota=STORED,
            limit=self.limit,
        )
