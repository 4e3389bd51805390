"""Whether the engine is reached as what it is: a node of a Redis Cluster named with
`redis://` (as one engine, `TOOLREF_REDIS_URL` without `redis+cluster://` or
`TOOLREF_REDIS_CLUSTER`) answers PING, so the service looked ready, while every command on
a key of another node's slots was answered MOVED, and every request 503. Said at start and
by `/readyz` (`misrouted`)."""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError


async def misrouted(redis: Any, cluster: bool) -> str | None:
    """Why the store cannot serve from this engine as configured (a cluster's node reached
    as one engine), or None: it can, or the engine does not say (down, or INFO refused).
    One INFO round trip."""
    if cluster:
        return None
    try:
        info = await redis.info("cluster")
    except RedisError:
        return None
    if str(info.get("cluster_enabled", 0)) != "1":
        return None
    return (
        "the store (TOOLREF_REDIS_URL) is a node of a Redis Cluster reached as one engine: "
        "every command on a key of another node's hash slots is refused (MOVED). Name it "
        "redis+cluster://host:port, or set TOOLREF_REDIS_CLUSTER=true"
    )
