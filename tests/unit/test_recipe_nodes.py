"""Recipe nodes and chunks as stored (`toolref_server.storage.recipe_nodes`,
`recipe_chunks`, `recipe_groups`, `recipe_held`): encoded and read back as they were; a
group's literals (each node's compressed against those before it) read back in order and
only in order; recipes made by any edits, every other one a snapshot, whose chunks (slices
of the chunks earlier snapshots stored, and new ones naming where each literal is stored)
hold exactly its entries; appends writing one chunk per snapshot; and bytes no version
wrote, or a chunk that does not hash to its id, read as not held."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.test_edits import EDITS, HEADERS, body_of, conversation, edited
from toolref.edits.edit import Inline, Keep, Op, diff
from toolref.edits.recipe import LITERAL, PIECE, entry_of, recipe_ref_of
from toolref.edits.request import Cut, cut
from toolref.wire.encoding import packb
from toolref_server.storage import recipe_groups
from toolref_server.storage.recipe_cache import RecipeCache
from toolref_server.storage.recipe_chunks import Chunks, StoredEdit, StoredOp, rechunk, settled
from toolref_server.storage.recipe_groups import chunk_entries, chunk_of, group_literals
from toolref_server.storage.recipe_held import Held, Parts, derive
from toolref_server.storage.recipe_nodes import (
    Chunk,
    Delta,
    Snapshot,
    blob_of,
    decode_chunk,
    decode_node,
    encode_chunk,
    encode_node,
    literals_of,
    node_ops,
)

ROOT = Path(__file__).resolve().parents[2]

ID = b"i" * 16
TOOLS = {"tools": ["t" * 20_000]}  # a piece


def stored(ops: list[Op], new: Cut) -> tuple[StoredEdit, list[bytes]]:
    """The edit as the registry stores it, and the bytes of the entries it adds."""
    edit: list[StoredOp] = []
    added: list[bytes] = []
    at = 0
    for op in ops:
        if isinstance(op, Keep):
            edit.append((op.start, op.end))
            at += op.end - op.start
        else:
            edit.append(new.entries[at])
            added.append(new.segments[at])
            at += 1
    return tuple(edit), added


def held_of(parts: Parts, chunks: Chunks | None = None) -> Held:
    """`parts` held, its literals stored in its own node (a group of one)."""
    return Held(
        parts.ref,
        parts.entries,
        parts.framed,
        parts.segments,
        parts.placed((parts.ref,)),
        chunks or parts.chunks,
        Snapshot((), (), b"", 1),
        None,
        (),
        (),
        b"",
    )


def snapshot(held: Held, literals: dict[str, list[bytes]]) -> Chunks:
    """The chunks a snapshot of `held` stores, each new one written and read back (its
    literals from `literals`, each node's), every slice within its chunk."""
    cut_up = settled(held.chunks, held.entries)
    ids: list[bytes | None] = []
    for index, was in enumerate(cut_up.ids):
        start, end = cut_up.starts[index], cut_up.ends[index]
        known = was
        if known is None:
            made, data = encode_chunk(chunk_of(held.entries[start:end], held.sources[start:end]))
            assert decode_chunk(data, b"x" * 16) is None  # not its id
            chunk = decode_chunk(data, made)
            assert chunk is not None
            by_group = {g: [literals[recipe_ref_of(i)] for i in g] for g in chunk.groups}
            read = chunk_entries(chunk, by_group)
            assert read == (held.entries[start:end], held.sources[start:end])
            known = made
        ids.append(known)
        assert cut_up.offsets[index] + end - start <= cut_up.totals[index]
    return Chunks(cut_up.lengths, cut_up.starts, cut_up.ends, ids, cut_up.offsets, cut_up.totals)


@given(
    st.lists(
        st.tuples(st.binary(min_size=16, max_size=16), st.integers(0, 99), st.integers(1, 99)),
        max_size=20,
    ),
    st.lists(st.integers(0, 5000), max_size=5),
    st.binary(max_size=40),
    st.integers(0, 2**40),
)
def test_a_snapshot_comes_back_as_written(
    slices: list[Any], lengths: list[int], blob: bytes, refreshed: int
) -> None:
    node = Snapshot(tuple(slices), tuple(lengths), blob, refreshed)
    assert decode_node(encode_node(node)) == node


def test_a_group_reads_back_in_order_and_only_so() -> None:
    rng = random.Random(5)
    words = [bytes(rng.choice(b"abcdefgh ") for _ in range(300)) for _ in range(12)]
    turns = [[words[i], words[i + 1] + b"!"] for i in range(0, 12, 2)]
    nodes: list[Snapshot | Delta] = []
    stream = b""
    for n, literals in enumerate(turns):
        blob, context = blob_of(literals, stream)
        node: Snapshot | Delta
        if n == 0:
            assert context == 0
            node = Snapshot((), tuple(map(len, literals)), blob, 1)
        else:
            node = Delta(ID, (ID,) * (n - 1), tuple(map(len, literals)), blob, context, 1)
        assert decode_node(encode_node(node)) == node
        nodes.append(node)
        stream = (stream + b"".join(literals))[-(32 << 10) :]
    found = group_literals(nodes)
    assert found is not None
    assert found[0] == turns
    assert group_literals(nodes[1:]) is None  # without the nodes before: not read
    assert literals_of(nodes[2], b"z" * nodes[2].context) is None


@given(st.integers(1, 25), st.integers(0, 10**6), st.lists(EDITS, min_size=1, max_size=10))
@settings(max_examples=100, deadline=None)
def test_chunks_hold_exactly_the_entries_of_any_recipe(
    turns: int, seed: int, hows: list[str]
) -> None:
    """Recipes made by any edits: each derived from the one before exactly (the client's
    cut), every other one a snapshot whose chunks, written and read back, hold exactly its
    entries and where each literal is stored."""
    rng = random.Random(seed)
    messages = conversation(turns, seed)
    first = cut(HEADERS, body_of(messages, TOOLS, "compact").encode(), "messages")
    assert first is not None
    edit, added = stored([Inline(s) for s in first.segments], first)
    parts = derive(None, edit, added)
    assert parts.ref == first.ref
    literals = {parts.ref: [parts.segments[at] for at in parts.added]}
    base = held_of(parts)
    base = held_of(parts, snapshot(base, literals))
    kept = {base.ref: base}
    for n, how in enumerate(hows):
        messages = edited(messages, how, rng)
        new = cut(HEADERS, body_of(messages, TOOLS, "compact").encode(), "messages")
        assert new is not None
        edit, added = stored(diff(base.entries, new.entries, new.segments), new)
        parts = derive(base, edit, added)
        assert (parts.ref, parts.entries, parts.segments) == (new.ref, new.entries, new.segments)
        assert sum(parts.chunks.lengths) == len(parts.entries)
        assert node_ops(edit)[1] == [parts.segments[at] for at in parts.added]
        if parts.ref in kept:  # kept before: its node is never written over
            base = kept[parts.ref]
            continue
        literals[parts.ref] = node_ops(edit)[1]
        base = held_of(parts)
        if n % 2:
            base = held_of(parts, snapshot(base, literals))
        kept[base.ref] = base


def test_appends_write_only_what_they_add() -> None:
    """A conversation that only grows: each snapshot writes one new chunk, the entries
    added since the last (the chunk before stays, as a slice without the closing glue)."""
    messages = [{"role": "user", "content": "q" * 3000}]
    made = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
    assert made is not None
    edit, added = stored([Inline(s) for s in made.segments], made)
    parts = derive(None, edit, added)
    literals = {parts.ref: [parts.segments[at] for at in parts.added]}
    held = held_of(parts)
    held = held_of(parts, snapshot(held, literals))
    written = []
    for turn in range(40):
        messages = [*messages, {"role": "assistant", "content": f"a{turn} " + "w" * 600}]
        new = cut(HEADERS, body_of(messages, {}, "compact").encode(), "messages")
        assert new is not None
        edit, added = stored(diff(held.entries, new.entries, new.segments), new)
        parts = derive(held, edit, added)
        literals[parts.ref] = node_ops(edit)[1]
        held = held_of(parts)
        if turn % 8 == 7:
            chunks = snapshot(held, literals)
            written.append(len(set(chunks.ids) - set(held.chunks.ids)))
            held = held_of(parts, chunks)
    assert written == [1] * 5
    assert len(held.chunks.ids) <= 6  # one per snapshot (and the first)


def test_rechunk_reads_no_entry() -> None:
    """The chunks of an edit come from the ops alone: an edit of a recipe of 10,000
    entries keeps its stored chunks as slices, its partly kept chunk as a shorter slice."""
    base = Chunks.whole([bytes([i]) * 16 for i in range(100)], [100] * 100)
    made = rechunk(base, ((0, 9_999), LITERAL + b",", PIECE + ID, (9_999, 10_000)))
    assert made.ids[:99] == base.ids[:99]
    assert (made.ids[99], made.offsets[99], made.lengths[99]) == (base.ids[99], 0, 99)
    assert made.ids[100:] == [None, base.ids[99]]
    assert made.offsets[101] == 99
    assert (sum(made.lengths), made.lengths[100:]) == (10_002, [2, 1])


def test_bytes_no_version_wrote_are_not_a_node() -> None:
    for data in [b"", b"\x00", b"\x01", b"\x02", b"\x02\x80", b"\x02\x81\xa1r\xa1x", b"\x04abc"]:
        assert decode_node(data) is None
    good = encode_node(Snapshot(((ID, 0, 1),), (), b"", 1))
    assert decode_node(good[:-1]) is None
    chunk = Chunk(((ID,),), (entry_of(b"y" * 20_000), (0, 0, 0)))
    assert decode_chunk(encode_chunk(chunk)[1], encode_chunk(chunk)[0]) == chunk
    for bad in [Chunk(((ID,),), ((1, 0, 0),)), Chunk((), (b"\x00short",))]:  # no group 1
        assert decode_chunk(*reversed(encode_chunk(bad))) is None


def _map_form(node: Snapshot | Delta) -> bytes:
    """A node as versions before the positional form wrote it (a msgpack map)."""
    fields: dict[str, Any] = {"r": node.refreshed}
    if node.blob:
        fields |= {"l": node.blob, "z": node.context}
    if isinstance(node, Snapshot):
        fields |= {"c": [list(c) for c in node.chunks], "n": list(node.lengths)}
    else:
        ops = [list(op) if isinstance(op, tuple) else op for op in node.ops]
        fields |= {"s": node.snapshot, "a": list(node.ancestors), "x": ops}
    return b"\x02" + packb(fields)


@pytest.mark.parametrize("depth", [0, 1, 5])
def test_a_delta_is_stored_positionally_and_the_map_form_still_reads(depth: int) -> None:
    """A delta's bytes name no member (a short turn's node was a tenth member names) and
    its ids go joined; what earlier versions stored (the map form) still reads, so a
    conversation kept before an upgrade goes on from its recipe."""
    ids = [bytes([n]) * 16 for n in range(depth + 1)]
    ops = ((0, 4), PIECE + b"p" * 16, 12)
    delta = Delta(ids[0], tuple(ids[1:]), ops, b"\x28\xb5literals", 300, 1_764_000_000)
    snapshot = Snapshot(((ID, 0, 3),), (5, 7), b"blob", 1_764_000_000)
    for node in (delta, snapshot):
        assert decode_node(encode_node(node)) == node
        assert decode_node(_map_form(node)) == node
    assert len(encode_node(delta)) <= len(_map_form(delta)) - 12 - 2 * depth


def test_a_positional_node_of_another_shape_is_not_a_node() -> None:
    """Unknown kinds, a chain that is not whole ids, a snapshot with a context: not held."""
    ops = [12]
    for fields in [
        [2, 1, b"", 0, ID, ops],  # no such kind
        [1, 1, b"", 0, ID + b"x", ops],  # a chain of 17 bytes
        [1, 1, b"", 0, b"", ops],  # no snapshot
        [0, 1, b"", 5, [], []],  # a snapshot against a context
        [1, "1", b"", 0, ID, ops],  # refreshed not a number
        [1, 1, b"", 0, ID],  # a member short
    ]:
        assert decode_node(b"\x02" + packb(fields)) is None


def test_the_cache_is_bounded_by_bytes_and_keeps_tenants_apart() -> None:
    cache: RecipeCache[Held] = RecipeCache(1000)
    cache.keep_pieces("a", [(b"1", b"x" * 600), (b"2", b"y" * 600)])
    assert cache.piece("a", b"1") is None  # dropped for the bound
    assert cache.piece("a", b"2") == b"y" * 600
    assert cache.piece("b", b"2") is None
    cache.keep_pieces("a", [(b"3", b"z" * 2000)])  # larger than the bound: not kept
    assert cache.piece("a", b"3") is None
    assert RecipeCache(0).piece("a", b"2") is None


def many_groups(count: int) -> tuple[list[bytes], list[Any]]:
    """Entries whose literals are stored in `count` groups of 8 nodes, one in each node:
    what a chunk rewritten whole holds after a long conversation (its runs: every node's
    group up to it)."""
    entries: list[bytes] = []
    sources: list[Any] = []
    for g in range(count):
        group = tuple(recipe_ref_of(g.to_bytes(8) + n.to_bytes(8)) for n in range(8))
        for n in range(8):
            entries.append(LITERAL + b"x")
            sources.append((group[: n + 1], 0))
    return entries, sources


def test_a_chunk_of_many_groups_is_made_in_steps_linear_in_its_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found: each run of a chunk's literals was compared with every group listed before it
    (a tuple sliced each time): quadratic in the groups, 1.5 s of the event loop for a
    chunk of 16,000 entries in 2,000 groups (a snapshot after a long conversation, rewriting
    its chunks whole). Counted here in the module's calls to `len`, one or two per run and
    group now, as many as runs x groups before."""
    calls = [0]

    def counted(value: Any) -> int:
        calls[0] += 1
        return len(value)

    monkeypatch.setattr(recipe_groups, "len", counted, raising=False)
    for count in (100, 400):
        entries, sources = many_groups(count)
        calls[0] = 0
        chunk = chunk_of(entries, sources)
        assert len(chunk.groups) == count
        assert calls[0] <= 3 * len(entries), (count, calls[0])


def test_a_chunk_is_the_same_in_every_process() -> None:
    """Its runs were ordered as a set hashed them (str hashing is seeded per process), so
    two workers keeping the same snapshot wrote the same entries as chunks of different ids
    (each worker's left in the store, counted, until its TTL)."""
    script = (
        "from tests.unit.test_recipe_nodes import many_groups\n"
        "from toolref_server.storage.recipe_groups import chunk_of\n"
        "from toolref_server.storage.recipe_nodes import encode_chunk\n"
        "print(encode_chunk(chunk_of(*many_groups(12)))[0].hex())\n"
    )
    ids = {
        subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(ids) == 1, ids
