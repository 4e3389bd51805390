"""The keyspace as `toolref-server cache export|import` reads and writes it: exported keys
with their values and lifetimes, a page at a time, and absent keys written back.

Synchronous (the CLI's own client). `items` walks the keyspace with SCAN (every primary in
turn on a cluster), keeps the keys an export carries (`keys.exported`), asks their sizes
(STRLEN, one pipeline a page of `PAGE` keys) and reads them in pipelines of at most
`PAGE_BYTES` (a larger value alone), so memory holds one page whatever the keyspace's size
and however large its values. `put_absent` writes with `SET NX`, one pipeline a batch, so
that writing twice changes nothing twice, and always with a lifetime. What the file holds,
and how it is checked, is `toolref_server.export`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from redis import Redis, RedisCluster
from redis.exceptions import RedisError

from toolref.wire.errors import StoreUnavailableError
from toolref_server.storage import keys, outage

PAGE: Final = 500
PAGE_BYTES: Final = 16 << 20  # values read in one pipeline, about (a larger one alone)

Client = Redis | RedisCluster
Item = tuple[bytes, bytes, int]  # key, value, remaining lifetime in ms (-1: none)


def items(redis: Client, tenant: str | None) -> Iterator[list[Item]]:
    """The exported keys of `tenant` (or of all tenants) with their values and lifetimes,
    one page at a time: at most `PAGE` keys and about `PAGE_BYTES` of values (a larger
    value alone); a page may come back empty when its keys expired meanwhile. The tenant
    must be in the tenant grammar: its name is a SCAN pattern."""
    for names in _pages(redis, keys.scan_pattern(tenant)):
        pipe = redis.pipeline(transaction=False)
        for key in names:
            pipe.strlen(key)
        sizes: list[Any] = pipe.execute()
        batch: list[bytes] = []
        held = 0
        for key, size in zip(names, sizes, strict=True):
            if batch and held + int(size) > PAGE_BYTES:
                yield _read(redis, batch)
                batch, held = [], 0
            batch.append(key)
            held += int(size)
        if batch:
            yield _read(redis, batch)


def _read(redis: Client, names: Sequence[bytes]) -> list[Item]:
    """The values and lifetimes of `names` (one pipeline), those that expired meanwhile
    left out."""
    pipe = redis.pipeline(transaction=False)
    for key in names:
        pipe.get(key)
        pipe.pttl(key)
    replies: list[Any] = pipe.execute()
    page: list[Item] = []
    for index, key in enumerate(names):
        value, ttl = replies[2 * index], replies[2 * index + 1]
        if value is None or ttl == -2:
            continue  # expired while we read
        page.append((key, value, ttl))
    return page


def _pages(redis: Client, pattern: str) -> Iterator[list[bytes]]:
    if isinstance(redis, RedisCluster):  # scan_iter walks every primary in turn
        page: list[bytes] = []
        for key in redis.scan_iter(match=pattern, count=PAGE):
            name = key if isinstance(key, bytes) else str(key).encode()
            if keys.exported(name):
                page.append(name)
            if len(page) >= PAGE:
                yield page
                page = []
        if page:
            yield page
        return
    cursor = 0
    while True:
        cursor, found = redis.scan(cursor=cursor, match=pattern, count=PAGE)
        names = [k if isinstance(k, bytes) else str(k).encode() for k in found]
        wanted = [k for k in names if keys.exported(k)]
        if wanted:
            yield wanted
        if cursor == 0:
            return


def put_absent(redis: Client, batch: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """Write each `[key, value, ttl_ms]` of `batch` whose key is absent, to live `ttl_ms`
    (positive: every key the service keeps expires, `export.Limits`); return (written,
    already present). One round trip; `StoreUnavailableError` when the engine fails (part
    of the batch may be written)."""
    pipe = redis.pipeline(transaction=False)
    for key, value, ttl in batch:
        pipe.set(key, value, nx=True, px=ttl)
    try:
        replies: list[Any] = pipe.execute()
    except RedisError as exc:  # some of the batch may be written
        said = outage.refused(exc)
        raise StoreUnavailableError(
            f"{outage.for_cli(said)}, then write them again"
            if said is not None
            else f"the engine failed while keys were written ({type(exc).__name__}: {exc}); "
            "write them again once it answers"
        ) from None
    written = present = 0
    for ok in replies:
        written += bool(ok)
        present += not ok
    return written, present
