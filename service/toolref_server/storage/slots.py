"""Multi-key reads on a cluster: a multi-key command must stay within one hash slot
(CROSSSLOT otherwise), so a batch of keys is read with one MGET per slot, queued on one
pipeline (one round trip), and the replies put back in key order. On one node, one MGET."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.crc import key_slot


def slot_groups(keys: Sequence[str], cluster: bool) -> list[list[int]]:
    """Positions of `keys` for one MGET each: all together on one node; on a cluster,
    grouped by hash slot (a multi-key command must stay within one slot)."""
    if not cluster:
        return [list(range(len(keys)))]
    groups: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key_slot(key.encode()), []).append(i)
    return list(groups.values())


def queue_mgets(pipe: Any, keys: Sequence[str], groups: Sequence[Sequence[int]]) -> None:
    """One MGET per group. The cluster pipeline refuses `mget` outright (it cannot merge
    replies across nodes); the raw command is routed by its keys, which share one slot."""
    for group in groups:
        pipe.execute_command("MGET", *[keys[i] for i in group])


def ungroup(groups: Sequence[Sequence[int]], replies: Sequence[Any], count: int) -> list[Any]:
    """The values of the MGETs `slot_groups` planned (the first replies), back in key order."""
    values: list[Any] = [None] * count
    for group, reply in zip(groups, replies, strict=False):
        for i, value in zip(group, reply, strict=True):
            values[i] = value
    return values
