"""`Batch`: Redis commands for one node, packed as they are queued and sent in one write.

redis-py's pipeline spends most of a turn's store time in Python (each command packed
through its encoder and response callbacks, a deadline per reply, observability hooks):
measured on uvloop against a local engine, a batch of five commands (two SETs of 2 KB, two
EXPIREs, a DEL) cost 139 us of CPU on redis-py 8.1 (78 us on 5.2) and 67 us as a `Batch`.
A `Batch` packs each command into RESP as it is queued (bytes, text as UTF-8, whole numbers
in decimal: what redis-py sends), takes a connection from the client's pool, writes the
whole batch at once and reads one reply per command, in order. Replies are the engine's
(`b"OK"`, integers, bulk strings, arrays), with no callbacks: callers read them as truth
values, numbers and bytes. A reply that is an error is raised once every reply is read
(the first of them), as redis-py's pipeline does; the connection stays usable.

What redis-py's own connection does stays its: connecting (the pool replaces one the
engine closed while it was pooled), the health check, timeouts, TLS, authentication. A
connection error mid-batch is retried as the client's `Retry` says (the service's: one
reconnect, `app._one_quick_retry`), the connection dropped before each new try; any other
failure, or a cancellation mid-batch, drops the connection (replies may be left unread on
it), as redis-py's own reads and writes do, before the pool gets it back. Only for one
node: a cluster's commands go through the cluster client's pipeline, which routes them by
slot (`Store.pipeline`). Linear in the commands and their bytes.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

Arg = bytes | str | int


class Batch:
    """Commands queued (`set`, `expire`, ..., or `execute_command`), then `execute`."""

    __slots__ = ("_count", "_parts", "_redis")

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._parts: list[bytes] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def execute_command(self, *args: Arg) -> None:
        """Queue one command: its name, then its arguments. O(its bytes)."""
        parts = self._parts
        parts.append(b"*%d\r\n" % len(args))
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts += (b"$%d\r\n" % len(data), data, b"\r\n")
        self._count += 1

    def set(self, key: str, value: bytes, *, nx: bool = False, ex: int | None = None) -> None:
        args: list[Arg] = ["SET", key, value]
        if ex is not None:
            args += ("EX", ex)
        if nx:
            args.append("NX")
        self.execute_command(*args)

    def expire(self, key: str, seconds: int, *, gt: bool = False, lt: bool = False) -> None:
        flag = ("GT",) if gt else ("LT",) if lt else ()
        self.execute_command("EXPIRE", key, seconds, *flag)

    def get(self, key: str) -> None:
        self.execute_command("GET", key)

    def getrange(self, key: str, start: int, end: int) -> None:
        self.execute_command("GETRANGE", key, start, end)

    def pttl(self, key: str) -> None:
        self.execute_command("PTTL", key)

    def strlen(self, key: str) -> None:
        self.execute_command("STRLEN", key)

    def incrby(self, key: str, amount: int) -> None:
        self.execute_command("INCRBY", key, amount)

    def delete(self, *keys: str) -> None:
        self.execute_command("DEL", *keys)

    async def execute(self) -> list[Any]:
        """Every reply, in order (see the module docstring); the batch is emptied."""
        count, packed = self._count, b"".join(self._parts)
        self._parts, self._count = [], 0
        if not count:
            return []
        pool = self._redis.connection_pool
        connection: AbstractConnection = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            replies: list[Any] = await connection.retry.call_with_retry(
                lambda: _exchange(connection, packed, count),
                lambda _: connection.disconnect(),
            )
            return replies
        except ResponseError:
            raise  # every reply was read: the connection is as sound as before
        except BaseException:
            await connection.disconnect(nowait=True)  # replies may be left unread on it
            raise
        finally:
            await pool.release(connection)


async def _exchange(connection: AbstractConnection, packed: bytes, count: int) -> list[Any]:
    await connection.send_packed_command(packed)
    replies: list[Any] = []
    error: ResponseError | None = None
    for _ in range(count):
        try:
            replies.append(await connection.read_response())
        except ResponseError as exc:  # the engine's error reply: the next ones follow it
            error = error or exc
            replies.append(exc)
    if error is not None:
        raise error
    return replies
