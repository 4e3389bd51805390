"""Groups and chunks, in memory: a group's literals read back in order, a delta replayed
on the recipe before it in its group, a chunk made from a recipe's entries and where their
literals are stored, and a chunk's entries read back.

Pure: no I/O. See `recipe_nodes` for what a group and a chunk are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toolref.edits.recipe import LITERAL, PIECE, Entry, parse_recipe_ref, recipe_ref_of
from toolref_server.storage.recipe_held import Held, Source, derive
from toolref_server.storage.recipe_nodes import (
    CONTEXT,
    Chunk,
    Delta,
    RecipeNode,
    Ref,
    edit_of,
    literals_of,
)

Read = tuple[list[list[bytes]], bytes]  # each node's literals, and the group's stream's end


def group_literals(nodes: Sequence[RecipeNode]) -> Read | None:
    """The literals of each of a group's `nodes` (its snapshot first, in order), and the
    end of their stream (`CONTEXT` bytes); None when one does not read. Linear in them."""
    found: list[list[bytes]] = []
    stream = b""
    for node in nodes:
        literals = literals_of(node, stream[-node.context :] if node.context else b"")
        if literals is None:
            return None
        found.append(literals)
        stream = (stream + b"".join(literals))[-CONTEXT:]
    return found, stream


def chunk_of(entries: Sequence[Entry], sources: Sequence[Source | None]) -> Chunk:
    """The chunk of `entries`: its literals by where `sources` says they are stored (each
    group listed once, its longest run of nodes; a shorter run goes to the first group
    listed that starts with it). Linear in the entries and the runs (each run's prefixes
    are looked up by hash, at most `snapshot_every` of them: not every group listed before
    it, which was quadratic in the groups of a chunk)."""
    # Longest first, then by their refs: the same chunk (and id) in every process, whatever
    # the order its set hashes to (str hashing is seeded per process).
    runs = sorted({s[0] for s in sources if s is not None}, key=_longest_first)
    groups: list[tuple[str, ...]] = []
    place: dict[tuple[str, ...], int] = {}
    for run in runs:
        if run in place:  # a prefix of a group listed before
            continue
        index = len(groups)
        groups.append(run)
        for end in range(1, len(run) + 1):
            place.setdefault(run[:end], index)
    made: list[bytes | Ref] = []
    for entry, source in zip(entries, sources, strict=True):
        if source is None:
            made.append(entry)
        else:
            run, index = source
            made.append((place[run], len(run) - 1, index))
    ids = tuple(tuple(recipe_id(ref) for ref in group) for group in groups)
    return Chunk(ids, tuple(made))


def _longest_first(run: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
    return -len(run), run


def literal_reads(chunk: Chunk, start: int, end: int, counts: dict[tuple[bytes, ...], int]) -> None:
    """Add to `counts` the nodes of each group (its first n) that reading the literals of
    `chunk`'s entries `start`..`end` takes. A snapshot reads the slices it holds, and no
    other literal: the rest of a chunk may name nodes it does not need, which its refresh
    does not extend (`recipes._everything`). Linear in the entries."""
    for entry in chunk.entries[start:end]:
        if not isinstance(entry, bytes):
            group = chunk.groups[entry[0]]
            counts[group] = max(counts.get(group, 0), entry[1] + 1)


def chunk_entries(
    chunk: Chunk,
    literals: Mapping[tuple[bytes, ...], list[list[bytes]]],
    start: int = 0,
    end: int | None = None,
) -> tuple[list[Entry], list[Source | None]] | None:
    """Entries `start`..`end` of `chunk` and their sources, its literals from `literals`
    (the literals of each group's first nodes, `group_literals`); None when one is
    missing. Linear in those entries (and the groups they name)."""
    refs: dict[int, tuple[str, ...]] = {}
    entries: list[Entry] = []
    sources: list[Source | None] = []
    for entry in chunk.entries[start:end]:
        if isinstance(entry, bytes):
            entries.append(entry)
            sources.append(None)
            continue
        group, member, index = entry
        read = literals.get(chunk.groups[group])
        if read is None or member >= len(read) or index >= len(read[member]):
            return None
        run = refs.get(group)
        if run is None:
            run = refs[group] = tuple(recipe_ref_of(i) for i in chunk.groups[group])
        entries.append(LITERAL + read[member][index])
        sources.append((run[: member + 1], index))
    return entries, sources


def recipe_id(ref: str) -> bytes:
    """The 16 bytes of a `tb_` ref this store made (so known to be one)."""
    found = parse_recipe_ref(ref)
    assert found is not None
    return found


def replayed(base: Held, ref: str, delta: Delta, pieces: Mapping[bytes, bytes]) -> Held | None:
    """The recipe `delta` (of `ref`) makes from `base`, the one before it in its group."""
    read = group_literals_after(base.stream, delta)
    if read is None:
        return None
    literals, stream = read
    edit = edit_of(delta, literals)
    added: list[bytes] = []
    given = iter(literals)
    for op in edit:
        if isinstance(op, bytes):
            data = pieces.get(op[1:]) if op[:1] == PIECE else next(given)
            if data is None:
                return None
            added.append(data)
    parts = derive(base, edit, added)
    snapshot = base.snapshot or base.ref
    path = (*base.path, ref)
    return Held(
        parts.ref,
        parts.entries,
        parts.framed,
        parts.segments,
        parts.placed((snapshot, *path)),
        parts.chunks,
        delta,
        snapshot,
        path,
        base.stored,
        stream,
        parts.length,
    )


def group_literals_after(stream: bytes, delta: Delta) -> tuple[list[bytes], bytes] | None:
    """The literals of `delta`, read after its group's `stream`, and the stream after."""
    literals = literals_of(delta, stream[-delta.context :] if delta.context else b"")
    if literals is None:
        return None
    return literals, (stream + b"".join(literals))[-CONTEXT:]
