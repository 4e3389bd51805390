"""Batched reads on one node or a cluster. On one node a batch is one MGET. On a cluster a
multi-key command must stay within one hash slot (CROSSSLOT otherwise), and even there it
is refused (TRYAGAIN) while a resharding has moved some of its keys and not the others,
which the cluster client resends until it gives up: so each key is read with its own GET,
queued on one pipeline, which the cluster client sends as one pipeline per node (one round
trip, the nodes at once), each GET following its own ASK or MOVED."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def queue_reads(pipe: Any, keys: Sequence[str], cluster: bool) -> int:
    """Queue on `pipe` the reads of `keys` (at least one); the number of replies they
    take, the first of the pipeline's (`read_values` reads them)."""
    if not cluster:
        pipe.execute_command("MGET", *keys)
        return 1
    for key in keys:
        pipe.get(key)
    return len(keys)


def read_values(replies: Sequence[Any], cluster: bool, count: int) -> list[Any]:
    """The values of the `count` keys `queue_reads` queued (None where absent), in key
    order, from the pipeline's replies."""
    return list(replies[:count]) if cluster else list(replies[0])
