"""Redis URLs: which name a Redis Cluster (`redis+cluster://`, `rediss+cluster://`), and the
plain URL a cluster client connects to first."""

from __future__ import annotations

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEMES)


def plain_url(url: str) -> str:
    """`redis+cluster://h:p` -> `redis://h:p` (what the cluster client connects to first)."""
    return url.replace("+cluster://", "://", 1) if is_cluster_url(url) else url
