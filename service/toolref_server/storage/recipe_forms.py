"""How a recipe to keep is stored (`recipes.Recipes.keep`): as a snapshot (its literals in
its node, its entries the slices of chunks, the fresh runs written as new chunks) or as a
delta on its base (its edit, its literals compressed against its group's). No I/O: what to
write is returned; the compression runs in `workers` when large.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolref.asgi.workers import Workers
from toolref_server.storage.recipe_chunks import Chunks, StoredEdit, settled
from toolref_server.storage.recipe_groups import chunk_of, recipe_id
from toolref_server.storage.recipe_held import Held, Parts
from toolref_server.storage.recipe_nodes import (
    CONTEXT,
    Chunk,
    Delta,
    Snapshot,
    blob_of,
    encode_chunk,
    node_ops,
)


def _encoded(chunks: Sequence[Chunk]) -> list[tuple[bytes, bytes]]:
    return [encode_chunk(chunk) for chunk in chunks]


async def snapshot_of(
    workers: Workers, parts: Parts, refreshed: int
) -> tuple[Held, list[tuple[bytes, bytes]]]:
    """The recipe as a snapshot (its literals stored in its node), and the chunks to
    write (id, value): its fresh runs, settled (`recipe_chunks.settled`). O(slices +
    the entries of its fresh runs)."""
    sources = parts.placed((parts.ref,))
    literals = [parts.segments[at] for at in parts.added]
    chunks = settled(parts.chunks, parts.entries)
    ids = list(chunks.ids)
    made: list[Chunk] = []
    places: list[int] = []
    for index, known in enumerate(ids):
        if known is None:
            start, end = chunks.starts[index], chunks.ends[index]
            made.append(chunk_of(parts.entries[start:end], sources[start:end]))
            places.append(index)
    written = await workers.run(8 * sum(len(c.entries) for c in made), _encoded, made)
    for index, (made_id, _) in zip(places, written, strict=True):
        ids[index] = made_id
    blob, _ = await workers.run(sum(map(len, literals)), blob_of, literals, b"")
    done = Chunks(chunks.lengths, chunks.starts, chunks.ends, ids, chunks.offsets, chunks.totals)
    lengths = tuple(map(len, literals))
    node = Snapshot(tuple(done.slices), lengths, blob, refreshed)
    stream = b"".join(literals)[-CONTEXT:]
    held = Held(
        parts.ref,
        parts.entries,
        parts.framed,
        parts.segments,
        sources,
        done,
        node,
        None,
        (),
        node.ids,
        stream,
        parts.length,
    )
    return held, written


async def delta_of(
    workers: Workers, parts: Parts, edit: StoredEdit, base: Held, refreshed: int
) -> Held:
    """The recipe as a delta on `base`: its literals compressed against its group's."""
    snapshot = base.snapshot or base.ref
    path = (*base.path, parts.ref)
    ops, literals = node_ops(edit)
    blob, context = await workers.run(sum(map(len, literals)), blob_of, literals, base.stream)
    node = Delta(
        recipe_id(snapshot), tuple(map(recipe_id, base.path)), ops, blob, context, refreshed
    )
    stream = (base.stream + b"".join(literals))[-CONTEXT:]
    sources = parts.placed((snapshot, *path))
    return Held(
        parts.ref,
        parts.entries,
        parts.framed,
        parts.segments,
        sources,
        parts.chunks,
        node,
        snapshot,
        path,
        base.stored,
        stream,
        parts.length,
    )
