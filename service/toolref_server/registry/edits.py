"""Applying an edit (`application/vnd.toolref.edit`): the request it stands for, kept as a
new recipe.

The steps, each a function below, in order: read the edit (`toolref.edits.wire.read`); its
base with the bytes of every segment (`Recipes.load`: the cache, else a few batched
reads); the bytes of the pieces it names (`Recipes.pieces`: the cache, else one batched
read); the dictionary its inline bytes were compressed against (slices of the base's
segments); the inline segments; the new recipe (`storage.recipe_held.derive`: entries,
segments and chunks from the base's in O(edit)); the request restored
(`toolref.edits.request.restore`); what the caller does to its body (`then`: the switch's
rewrite); then the recipe kept (`Recipes.keep`). Every refusal
comes before anything is stored: a base not held whole (409 `missing-history`), pieces
named and not held (409 `missing-pieces`, every one at once), inline bytes against another
dictionary (400 `dictionary-mismatch`), an edit that does not fit its base or a first
segment that is not headers (400), a request past the inflated limit (413).

Cost, with the base held by this process: Python steps linear in the edit (its ops, the
entries it adds, the pieces it names, the entries scanned for chunk boundaries around
what changed); C-speed steps linear in the request (list slices, the dictionary's join, the
body's join, one SHA-256 over the framed entries). On a worker that does not hold the base,
the base is read once (linear in it). Inflating, the dictionary, the inline pieces' ids
(a SHA-256 of each) and the join run in a worker thread when large (`Workers`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

from toolref.asgi.budget import Account
from toolref.asgi.workers import Workers
from toolref.edits import wire
from toolref.edits.answer import answer_id
from toolref.edits.edit import EditError, Inline, Keep, Named, Op, dictionary_ranges
from toolref.edits.recipe import LITERAL, PIECE, PIECE_MIN, piece_ref
from toolref.edits.request import Restored, restore
from toolref.kit.quieted import Quieted
from toolref.wire.errors import (
    BadRequestError,
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MissingHistoryError,
    MissingPiecesError,
    ToolrefError,
)
from toolref_server.settings import Settings
from toolref_server.storage.answers import Answers
from toolref_server.storage.quotas import RequestRate
from toolref_server.storage.recipe_chunks import StoredEdit, StoredOp
from toolref_server.storage.recipe_held import (
    ENTRY_OVERHEAD,
    Held,
    Parts,
    context,
    derive,
    kept_bytes,
)
from toolref_server.storage.recipes import Recipes, piece_id

_GAP: Final = Inline(b"")  # an inline op before its bytes are read (dictionary_ranges)
log = logging.getLogger("toolref.edits")
quiet = Quieted(log)  # a store down fails every turn's keep: said once a minute


class Editing(Protocol):
    """What applying an edit uses (the service's `Services` holds them): the settings (the
    inflated limit, the entries' bound), the recipes, the worker threads, the request rate."""

    @property
    def settings(self) -> Settings: ...

    @property
    def recipes(self) -> Recipes: ...

    @property
    def answers(self) -> Answers: ...

    @property
    def workers(self) -> Workers: ...

    @property
    def rate(self) -> RequestRate: ...


@dataclass(frozen=True, slots=True)
class Applied:
    """An edit applied: the recipe kept (`ref`), the request it stands for, the body to
    forward (`body`: the request's, as `then` made it), and the sizes of the body (`raw`)
    and of the edit as sent (`wire`)."""

    ref: str
    request: Restored
    body: bytes
    raw: int
    wire: int
    head: bytes = b""  # segment 0 as the edit restores it: credential lines name-only
    base: str | None = None  # the recipe the edit was applied to
    edit: StoredEdit = ()  # its ops as stored: ranges kept of the base, entries added
    added: Sequence[bytes] = ()  # the bytes of each entry added, in order
    segments: Sequence[bytes] = ()  # the request's segments, headers first
    keeping: Keeping | None = None  # the recipe being kept (`later`), or None

    async def kept(self) -> None:
        """The recipe's keeping (`later`) awaited once the answer went out (call it once):
        a failure (the store down, the stored-bytes quota) is logged; the client's next edit
        of it is answered 409 and resent."""
        await kept(self.keeping, self.ref)

    async def keeping_done(self) -> None:
        """Until the recipe's keeping ended, however (`kept` says how); at once without."""
        await keeping_done(self.keeping)

    def as_edit(self, held: str | None) -> list[Op]:
        """The request as the ops of an edit of `held` (the recipe its receiver holds, when
        it is the base this edit was applied to: ranges kept, the rest inline), else of
        nothing (every segment inline). O(ops), or O(segments) with no base held."""
        if held is None or held != self.base:
            return [Inline(segment) for segment in self.segments]
        added = iter(self.added)
        return [Keep(*op) if isinstance(op, tuple) else Inline(next(added)) for op in self.edit]


class Keeping:
    """A recipe kept while its request is answered (`later`), in a task that waits for
    `start`: the caller starts it once the request went upstream, so that the keep's work
    (encoding, compressing, the store's round trip) runs while the upstream thinks, not
    before the request is sent (a task created first runs first). `kept` and `keeping_done`
    start it too, so it always runs. Its result is dropped: a task holds its result while
    referenced, and a kept recipe holds the request's segments. `begun`: told the task
    when it is let begin (`Recipes.keeping`: a load of the recipe here waits for it then;
    one never begun is held by nothing)."""

    __slots__ = ("_begun", "_gate", "task")

    def __init__(
        self, keep: Awaitable[object], begun: Callable[[asyncio.Task[None]], None] | None = None
    ) -> None:
        self._gate = asyncio.Event()
        self._begun = begun
        self.task = asyncio.get_running_loop().create_task(self._run(keep))

    async def _run(self, keep: Awaitable[object]) -> None:
        await self._gate.wait()
        await keep

    def start(self) -> None:
        """Let the keeping begin (again: nothing)."""
        if not self._gate.is_set():
            self._gate.set()
            if self._begun is not None:
                self._begun(self.task)


async def kept(keeping: Keeping | None, ref: str) -> None:
    """`Applied.kept` with what it needs alone (a caller streaming an answer holds these,
    not the request's bytes)."""
    if keeping is None:
        return
    keeping.start()
    try:
        await asyncio.shield(keeping.task)  # a cancelled caller leaves it to finish
    except ToolrefError as exc:
        quiet.warning("recipe %s not kept: %s", ref, exc.detail)
    except Exception:  # the store's own failure: logged, the next turn resends
        log.exception("recipe %s not kept", ref)


async def keeping_done(keeping: Keeping | None) -> None:
    """Until a recipe's keeping ended, however (started first); at once without."""
    if keeping is not None:
        keeping.start()
        await asyncio.wait({keeping.task})


Then = Callable[[bytes], Awaitable[bytes]]  # the body as forwarded, from the body restored


async def _as_it_is(body: bytes) -> bytes:
    return body


async def apply_edit(
    services: Editing,
    tenant: str,
    data: bytes,
    secrets: Sequence[tuple[str, str]] | None,
    account: Account,
    *,
    then: Then = _as_it_is,
    whole: bool = True,
    later: bool = False,
    outage: bool = False,
) -> Applied:
    """The request the edit in `data` stands for (credentials from `secrets`; None: left
    name-only, for a receiver that fills them itself and whose registry never sees one),
    its recipe kept for `tenant`; see the module docstring. Bytes kept are charged to
    `account`.
    `then`: what the caller does to the body before it is forwarded (the switch's rewrite),
    done before anything is kept, so that its refusal too stores nothing. `whole` False: the
    body is not joined (a receiver that takes the request's segments joins them itself), only
    its headers' segment checked. `later`: the recipe is kept while the caller answers (in
    `Applied.keeping`, which the caller awaits once it answered): a turn's answer does not
    wait on the store; a recipe that could not be kept (the store down) is held by this
    process still (`Recipes.keep`): its next turn here (a channel's) is an edit of it,
    another process's a resend; never this turn. Under a stored-bytes quota, or once the
    store failed (until a call reaches it again), the recipe is kept before the answer, as
    without `later`: a refusal is the answer (429, 503), on which a chat backend's
    middleware has its client send the request as it is (415). `outage` (the gateway's,
    whose sender hands a 503 to its agent): once the store failed too the recipe is kept
    after the answer (its keep fails fast, or reaches the store come back), so a turn whose
    base this process holds is served through a store outage and just after it."""
    settings, recipes, workers = services.settings, services.recipes, services.workers
    limit = settings.max_decompressed_bytes
    # O(header): ops and lengths, the recipe's entries counted; off the loop when large
    header, blob = await workers.run(
        len(data), wire.read, data, max_inline=limit, max_entries=settings.max_edit_entries
    )
    services.rate.admit(tenant)
    base = await _base(services, tenant, header.base)  # cache, else a few batched reads
    named = [op.piece for op in header.ops if isinstance(op, Named)]
    first = header.ops[0] if header.ops else None  # the headers' segment: not in `limit`
    aside = first.piece if isinstance(first, Named) else None
    # cache, else one batched read; their sizes held to `limit` before any is inflated
    held = await recipes.pieces(tenant, named, limit=limit, aside=aside)
    words = await workers.run(header.dictionary or 0, _dictionary, base, header)  # O(ops + z)
    account.charge(len(words))
    answer = await _answer(services, tenant, header)  # v3: the base's answer
    work = header.inline + len(blob)  # records read, and what they inflate to
    inline = await workers.run(work, wire.inline, header, blob, words, account, answer)
    pieces = sum(len(s) for s in inline if len(s) >= PIECE_MIN)
    ids = await workers.run(pieces, _piece_ids, inline)  # a SHA-256 of each: off the loop
    carried = {ref: data for ref, data in zip(ids, inline, strict=True) if ref is not None}
    edit, added = _edit(header.ops, inline, ids, carried, held)  # O(ops)
    raw = await workers.run(header.entries, _size, base, edit, added)  # O(entries), C speed
    if raw > limit:
        raise DecompressedTooLargeError(
            f"the edit stands for a body of {raw} bytes, over the limit of {limit} "
            "(TOOLREF_MAX_DECOMPRESSED_BYTES); send a smaller request",
            limit=limit,
        )
    account.charge(raw + ENTRY_OVERHEAD * header.entries)  # before the lists are built
    parts = await workers.run(raw, _derived, base, edit, added)  # O(edit), slices of the base's
    if whole:
        request = await workers.run(raw, restore, parts.segments, secrets)  # O(body): one join
    else:
        request = restore(parts.segments[:1], secrets)  # the headers' segment checked
    if request is None:
        raise BadRequestError(
            "the edit's first segment is not the request's headers with a line for each "
            "credential sent alongside (toolref.edits.segments.header_segment); send every "
            "credential it names (x-api-key, authorization, ...) as a real header, or the "
            "request whole"
        )
    body = await then(request.body)  # may refuse: nothing is kept yet
    named_held = [p for p in named if p not in carried]
    keep = recipes.keep(tenant, parts, edit, base=base, pieces=carried, named=named_held)
    keeping = None
    store = recipes.store
    if later and (store.sound or (outage and store.quota is None)):  # else refused (above)
        keeping = Keeping(keep, partial(recipes.keeping, tenant, parts.ref))  # waited for
    else:
        await keep
    head = parts.segments[0]
    return Applied(
        parts.ref, request, body, raw, len(data), head, header.base, edit, added, parts.segments,
        keeping,
    )  # fmt: skip


async def _base(services: Editing, tenant: str, ref: str | None) -> Held | None:
    """The base the edit names (None: none); `MissingHistoryError` when it is not held
    whole."""
    if ref is None:
        return None
    held = await services.recipes.load(tenant, ref)
    if held is None:
        raise MissingHistoryError(
            f"the edit's base {ref} is not held (never kept for this API key, expired or "
            "evicted); send the edit again with no base (`b` null), its segments inline or "
            "named",
            ref,
        )
    return held


async def _answer(services: Editing, tenant: str, header: wire.Header) -> bytes | None:
    """The answer the base's request streamed, for an edit of version 3 (None for another);
    `DictionaryMismatchError` when this registry holds none, or other bytes than named."""
    if header.answer is None or header.base is None:
        return None
    answer = await services.answers.get(tenant, header.base)
    if answer is None or answer_id(answer) != header.answer:
        held = "no answer" if answer is None else f"answer {answer_id(answer)}"
        raise DictionaryMismatchError(
            f"the edit's model segments are compressed against answer {header.answer} of "
            f"{header.base}, and this registry holds {held} for it; send the edit again as "
            "version 2 (each segment as it is or compressed alone)"
        )
    return answer


def _dictionary(base: Held | None, header: wire.Header) -> bytes:
    """The last `z` bytes of the base's segments in dictionary order (b"" for none), as
    `toolref.edits.edit.dictionary` gives them: each range joined from the end, until `z`
    bytes. O(ops log ops) steps, C-speed joins."""
    size = header.dictionary or 0
    if not size or base is None:
        return b""
    ops: list[Op] = [_GAP if type(op) is int else op for op in header.ops]  # type: ignore[misc]
    found: list[bytes] = []
    left = size
    for start, end in reversed(dictionary_ranges(len(base.entries), ops)):
        if left <= 0:
            break
        data = context(base.segments[start:end], left)  # O(left), not O(range)
        found.append(data)
        left -= len(data)
    return b"".join(reversed(found))


def _piece_ids(inline: Sequence[bytes]) -> list[bytes | None]:
    """The id of each inline segment that is a piece (`PIECE_MIN` bytes or more), None for
    the others. O(inline): a SHA-256 of each piece."""
    return [piece_id(data) if len(data) >= PIECE_MIN else None for data in inline]


def _edit(
    listed: Sequence[Keep | Named | int],
    inline: Sequence[bytes],
    ids: Sequence[bytes | None],
    carried: Mapping[bytes, bytes],
    held: Mapping[bytes, bytes],
) -> tuple[StoredEdit, list[bytes]]:
    """The edit as stored (ranges kept, entries added) and the bytes of the entries it
    adds; `MissingPiecesError` listing every piece named and not held. O(ops)."""
    segments = iter(zip(inline, ids, strict=True))
    edit: list[StoredOp] = []
    added: list[bytes] = []
    lacking: dict[bytes, None] = {}
    for op in listed:
        if isinstance(op, Keep):
            edit.append((op.start, op.end))
        elif isinstance(op, Named):
            found = carried.get(op.piece) or held.get(op.piece)
            if found is None:
                lacking[op.piece] = None
                continue
            edit.append(PIECE + op.piece)
            added.append(found)
        else:
            data, ref = next(segments)
            edit.append(LITERAL + data if ref is None else PIECE + ref)
            added.append(data)
    if lacking:
        raise MissingPiecesError(
            f"the edit names {len(lacking)} piece(s) this registry does not hold (never kept "
            "for this API key, expired or evicted): missingPieces lists them; send the edit "
            "again with those segments inline",
            [piece_ref(p) for p in lacking],
        )
    return tuple(edit), added


def _size(base: Held | None, edit: StoredEdit, added: Sequence[bytes]) -> int:
    """Bytes of the body the edit stands for (its headers' segment aside), before any list
    of the recipe is built: the base's length less what the ranges leave out
    (`recipe_held.kept_bytes`: O(ops + entries not kept), C-speed sums); `EditError` as
    `derive`, and for a range that would place the base's empty headers' segment after the
    first (the registry's answer as an edit could not say it: `wire.read` refuses an empty
    segment but the first)."""
    length = len(base.segments) if base is not None else 0
    for index, op in enumerate(edit):
        if isinstance(op, tuple):
            start, end = op
            if base is None or not 0 <= start < end <= length:
                raise BadRequestError(
                    f"the edit keeps entries {start} to {end} of a base of {length}; compute "
                    "the edit against the base it names (toolref.edits.edit.diff), or send "
                    "the request whole"
                )
            if index and not start and not base.segments[0]:  # only entry 0 may be empty
                raise BadRequestError(
                    f"the edit's op {index} keeps the base's empty headers' segment (entry 0) "
                    "after its first: a request has no empty segment but its headers' (its "
                    "first); keep base entries from 1 on, or send the request whole"
                )
    total = kept_bytes(base, edit) + sum(map(len, added))
    first = edit[0] if edit else None
    if isinstance(first, tuple):
        assert base is not None
        return total - len(base.segments[first[0]])
    return total - (len(added[0]) if added else 0)


def _derived(base: Held | None, edit: StoredEdit, added: Sequence[bytes]) -> Parts:
    try:
        return derive(base, edit, added)
    except EditError as exc:
        raise BadRequestError(
            f"{exc}; compute the edit against the base it names (toolref.edits.edit.diff), "
            "or send the request whole"
        ) from None
