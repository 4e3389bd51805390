"""`toolref-server cache export|import`: records and summaries to a file and back.

The file is a zstd-compressed stream of msgpack items: a header
`{"toolrefExport": 1, "tenant": ...}`, then one `[key, value, ttl_ms]` per key (`ttl_ms` is
-1 for keys without expiry). Export walks the keyspace with SCAN and reads each page with
one pipeline, so memory stays constant whatever the size; import writes with `SET NX`, so
importing twice (or into an engine that already holds some keys) changes nothing twice.
Summary locks are never exported.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any, Final

import msgpack
import zstandard
from redis import Redis, RedisCluster

from toolref.errors import ValidationError
from toolref_server.settings import TENANT_RE as TENANT_NAME  # the one tenant grammar

FORMAT: Final = 1
_PAGE: Final = 500

Progress = Callable[[int, int], None]  # (keys done, bytes done)


def _pattern(tenant: str | None) -> str:
    """The SCAN pattern of one tenant's keys, or of all. A tenant is matched literally: a
    name outside the tenant grammar (empty, a glob, a colon) would widen the match to other
    tenants' keys, so it is refused."""
    if tenant is None:
        return "tr:*"
    if not TENANT_NAME.fullmatch(tenant):
        raise ValidationError(
            f"{tenant!r} is not a tenant name (1-64 of A-Z a-z 0-9 _ . -, as in "
            "TOOLREF_API_KEYS); name one tenant, or leave out --tenant to export them all"
        )
    return f"tr:{tenant}:*"


def export(
    redis: Redis | RedisCluster,
    out: IO[bytes],
    tenant: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Write every record and summary (of one tenant, or all) to `out`; return the count."""
    pattern = _pattern(tenant)  # refuses a bad tenant before anything is written
    count = size = 0
    writer = zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False)
    packer = msgpack.Packer(use_bin_type=True)
    writer.write(
        packer.pack({"toolrefExport": FORMAT, "tenant": tenant, "created": int(time.time())})
    )
    for keys in _pages(redis, pattern):
        pipe = redis.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
            pipe.pttl(key)
        replies: list[Any] = pipe.execute()
        for index, key in enumerate(keys):
            value, ttl = replies[2 * index], replies[2 * index + 1]
            if value is None or ttl == -2:
                continue  # expired while we read
            item = packer.pack([key, value, ttl])
            writer.write(item)
            count += 1
            size += len(item)
        if progress is not None:
            progress(count, size)
    writer.flush(zstandard.FLUSH_FRAME)
    return count


def _pages(redis: Redis | RedisCluster, pattern: str) -> Iterator[list[bytes]]:
    if isinstance(redis, RedisCluster):  # scan_iter walks every primary in turn
        page: list[bytes] = []
        for key in redis.scan_iter(match=pattern, count=_PAGE):
            name = key if isinstance(key, bytes) else str(key).encode()
            if not name.endswith(b":lock"):
                page.append(name)
            if len(page) >= _PAGE:
                yield page
                page = []
        if page:
            yield page
        return
    cursor = 0
    while True:
        cursor, keys = redis.scan(cursor=cursor, match=pattern, count=_PAGE)
        names = [k if isinstance(k, bytes) else str(k).encode() for k in keys]
        wanted = [k for k in names if not k.endswith(b":lock")]
        if wanted:
            yield wanted
        if cursor == 0:
            return


def import_(
    redis: Redis | RedisCluster, source: IO[bytes], progress: Progress | None = None
) -> tuple[int, int]:
    """Write the keys of an export that are absent; return (written, already present)."""
    reader = zstandard.ZstdDecompressor().stream_reader(source, closefd=False)
    unpacker = msgpack.Unpacker(reader, raw=False, max_buffer_size=256 * 2**20)
    header = next(unpacker, None)
    if not isinstance(header, dict) or header.get("toolrefExport") != FORMAT:
        raise ValidationError(
            "the file is not a toolref export (version 1); make one with "
            "`toolref-server cache export`"
        )
    written = present = done = 0
    batch: list[list[Any]] = []

    def flush() -> None:
        nonlocal written, present
        pipe = redis.pipeline(transaction=False)
        for key, value, ttl in batch:
            pipe.set(key, value, nx=True, px=ttl if ttl > 0 else None)
        for ok in pipe.execute():
            written += bool(ok)
            present += not ok
        batch.clear()

    for item in unpacker:
        key, value, ttl = item
        batch.append([key, value, ttl])
        done += 1
        if len(batch) >= _PAGE:
            flush()
            if progress is not None:
                progress(done, 0)
    if batch:
        flush()
    if progress is not None:
        progress(done, 0)
    return written, present


def bar(verb: str, stream: IO[str] = sys.stderr) -> Progress:
    """A one-line progress display (rewritten in place on a terminal)."""
    started = time.monotonic()
    interactive = stream.isatty()
    last = [0.0]

    def show(keys: int, size: int) -> None:
        now = time.monotonic()
        if interactive or now - last[0] >= 5:
            rate = keys / max(now - started, 1e-6)
            volume = f", {size / 2**20:.1f} MiB" if size else ""
            end = "\r" if interactive else "\n"
            stream.write(f"{verb} {keys:,} keys{volume} ({rate:,.0f}/s){end}")
            stream.flush()
            last[0] = now

    return show
