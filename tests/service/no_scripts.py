"""A connection to the test engine as a user its ACL does not let run Lua scripts (NOPERM
for EVAL, EVALSHA and functions: what a managed engine may do), for the tests of what falls
back to plain commands (`toolref_server.storage.scripting`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from toolref_server.storage.redis import is_cluster_url

_REFUSED = ("-eval", "-evalsha", "-eval_ro", "-evalsha_ro", "-fcall", "-fcall_ro")


@contextlib.asynccontextmanager
async def no_scripts(engine_url: str, redis: Redis, user: str) -> AsyncIterator[Redis]:
    """A client of the engine at `engine_url` as `user`, who may run every command but
    scripts (checked: EVAL answers NOPERM); the user is deleted after. A cluster: skipped
    (the user would be needed on every node)."""
    if is_cluster_url(engine_url):
        pytest.skip("an ACL user on every node of a cluster: not set up here")
    password = f"{user}-password"
    setuser = ("ACL", "SETUSER", user, "reset", "on", f">{password}", "~*", "&*", "+@all")
    await redis.execute_command(*setuser, *_REFUSED)  # type: ignore[no-untyped-call]
    limited = Redis.from_url(engine_url, username=user, password=password)
    try:
        with pytest.raises(ResponseError, match=r"(?i)no permissions"):
            await limited.eval("return 0", 0)
        yield limited
    finally:
        await limited.aclose()
        await redis.execute_command("ACL", "DELUSER", user)  # type: ignore[no-untyped-call]
