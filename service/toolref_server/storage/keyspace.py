"""The keyspace as `toolref-server cache export|import` reads and writes it: exported keys
with their values and lifetimes, a page at a time, and absent keys written back.

Synchronous (the CLI's own client). `items` walks the keyspace with SCAN (every primary in
turn on a cluster), keeps the keys an export carries (`keys.exported`) and reads each page
with one pipeline, so memory holds one page (`PAGE` keys) whatever the size. `put_absent`
writes with `SET NX`, one pipeline a batch, so that writing twice changes nothing twice.
What the file holds, and how it is checked, is `toolref_server.export`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from redis import Redis, RedisCluster

from toolref_server.storage import keys

PAGE: Final = 500

Client = Redis | RedisCluster
Item = tuple[bytes, bytes, int]  # key, value, remaining lifetime in ms (-1: none)


def items(redis: Client, tenant: str | None) -> Iterator[list[Item]]:
    """The exported keys of `tenant` (or of all tenants) with their values and lifetimes,
    one page at a time (a page may come back empty when its keys expired meanwhile). The
    tenant must be in the tenant grammar: its name is a SCAN pattern."""
    for names in _pages(redis, keys.scan_pattern(tenant)):
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
        yield page


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
    """Write each `[key, value, ttl_ms]` of `batch` whose key is absent (`ttl_ms` -1: no
    lifetime); return (written, already present). One round trip."""
    pipe = redis.pipeline(transaction=False)
    for key, value, ttl in batch:
        pipe.set(key, value, nx=True, px=ttl if ttl > 0 else None)
    written = present = 0
    for ok in pipe.execute():
        written += bool(ok)
        present += not ok
    return written, present
