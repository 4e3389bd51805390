"""`Editor`: a client's LLM requests sent as edits of the recipes its gateway confirmed
(issue 30; `toolref.edits` is the algorithm, this is its client's memory and choices).

Sans-I/O: `prepare` turns a request (headers, body) into an `Edit` (the body and headers to
send); the caller sends it and hands the answer back: `confirm` when it names the recipe
(`Toolref-History`), `on_miss` for a problem the editor resends on (409 missing-history,
409 missing-pieces, 400 dictionary-mismatch), which gives the next attempt. At most
`MAX_RESENDS` resends, the last with every segment inline and no base: every miss recovers
by itself.

Per request:
- The base is the confirmed recipe sharing the most piece bytes with it (ties: the most
  recently used), among those sharing a piece of one of its messages: a conversation is
  only ever sent against its own past (a base sharing only the envelope, the headers,
  `tools` or `system`, is not used: those pieces are named instead). No such recipe: no
  base, every piece a confirmed recipe holds named by its id, the rest inline, plain zstd.
- The ops are `edit.diff` against the base, with the pieces of every confirmed recipe as
  held (named by id when the base lacks them).
- Size-guarded (the default): each inline segment travels in a compression context of its
  own (a version-2 edit, `toolref.edits.isolated`): as it is or compressed alone, so that
  no segment's size tells what else the conversation holds (an attacker's text repeating
  a secret costs what a wrong guess does). Against a gateway that reads version 1 only,
  they travel as they are (one frame of them all would put the turn's new segments in one
  context: an attacker's page beside a secret a tool read). Unguarded (`size_guard=False`,
  for a link whose sizes no one else sees): the inline bytes are compressed together
  against the last `z` bytes of the base's segments in edit order, z = min(base bytes,
  max(32 KiB, 32 x inline bytes), 1 MiB); only the chosen base's bytes, never another
  conversation's. When compressing does not make them smaller they travel as they are.
- The answer a confirmed recipe's request streamed (`answered`, from the caller's
  `toolref.edits.answer.AnswerTap`) is the dictionary of the model's segments of the next
  edit of it (version 3, against a gateway that reads it): the assistant message the agent
  writes back costs how it differs from the answer. Only that message's segments: the one
  just after the base's messages (`_rendering`; for OpenAI Responses, the run of the
  model's items from there, reasoning and calls too, up to the first tool output or user
  message), never an older model message the base
  lacks (one the agent rewrote, its thinking dropped, say: compressed against the answer,
  its size told whether the answer, which a fetched page can steer, repeats a secret it
  holds). The answers of the last
  `max_recipes` recipes still kept are, each at most `answer.MAX_ANSWER` bytes, counted
  with the recipes in `max_bytes` (past it the least recently used recipes go, as for a
  recipe kept).
- Once confirmed, the recipe is kept (`recipes.Recipes`, bounded) and its base dropped when
  it continues the base (`Recipes.continues`: half of the base's bytes and its last
  message; the conversation moved on: one recipe per live conversation, so choosing a base
  stays linear). Another conversation opening with the base's messages leaves it kept.

A request whose recipe would hold more entries than a receiver takes by default
(`MAX_ENTRIES`, about 25,000 messages), or than the limit its receiver said in a 413
(`prepare`'s `most`: `toolref.sending.entries`), is not made an edit: it goes as it came.

A first attempt with no base whose edit would put more bytes on the wire than the request
as it came, and that no later turn could be sent as an edit of (no message of
`RELATED_MIN` bytes: `Recipes.best_base` relates a request to a recipe by such a message
only), is not worth an edit (`not_worth_an_edit`): every sender (the relay, the manager and
transports, and JS's manager, `edits/editor.ts`'s twin) sends it as it came. A tiny request's
edit costs more than the request (the edit's framing, the media type), and a recipe of it
would save the next turn nothing; one that could be a base goes as an edit whatever it
costs, since the turns after it are edits of it.

Cost: linear in the request (a cut, one look-up per piece, a diff, at most 1 MiB of
dictionary and one zstd pass over the inline bytes); a turn of a conversation whose body
before was cut here costs what it added in Python, the rest at C speed: the cut goes on
from the body before (`toolref.edits.bodycut`), the base is that body's recipe
(`_resumed`), the diff steps over the segments both hold (`edit.diff`'s `same`), and the
recipe is kept on its base's bookkeeping (`Recipes.keep`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref.edits import wire
from toolref.edits.bodycut import unshared
from toolref.edits.edit import Inline, Keep, Op, dictionary, dictionary_order, diff, kept_bytes
from toolref.edits.recipe import parse_piece_ref
from toolref.edits.request import Cut, cut
from toolref.sending.recipes import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_RECIPES,
    RELATED_MIN,
    Recipe,
    Recipes,
)
from toolref.wire.errors import DictionaryMismatchError, MissingHistoryError, MissingPiecesError

MAX_RESENDS: Final = 3
MIN_DICTIONARY: Final = 32 << 10
MAX_DICTIONARY: Final = wire.MAX_DICTIONARY  # what a receiver reads
# Entries of a recipe a receiver takes by default (TOOLREF_MAX_EDIT_ENTRIES; past it, 413
# `too-many-items`): a request of more (about 25,000 messages) goes as it is. A receiver set
# lower says so in its 413, which every sender resends as it is (`toolref.sending.entries`).
MAX_ENTRIES: Final = wire.DEFAULT_MAX_ENTRIES
DICTIONARY_PER_INLINE: Final = 32
# A body cut on from a confirmed recipe's, sharing this much of its bytes with it at the same
# places, is sent against it without counting what it shares with every recipe.
RESUMED_SHARE: Final = 0.75

MISSING_HISTORY: Final = MissingHistoryError.problem_type()
MISSING_PIECES: Final = MissingPiecesError.problem_type()
DICTIONARY_MISMATCH: Final = DictionaryMismatchError.problem_type()


@dataclass(frozen=True, slots=True)
class Edit:
    """One attempt of a request as an edit: `body` and `headers` to send (the media type and
    the request's credentials; the caller adds its own: the tenant's key, say), the recipe
    it makes (`ref`), its base, and how it was built (for the next attempt)."""

    cut: Cut
    body: bytes
    headers: tuple[tuple[str, str], ...]
    base: str | None
    kept: int  # the base's bytes its `Keep` ops keep, each entry once (`Recipes.continues`)
    inline: int  # inline bytes, before compression
    resends: int = 0
    unheld: frozenset[bytes] = frozenset()  # pieces the gateway said it lacks
    plain: bool = False  # no dictionary (after a mismatch)
    whole: bool = False  # no base, nothing named: every segment inline
    version: int = wire.VERSION  # the edits version it is written for (`Editor.version`)

    @property
    def ref(self) -> str:
        return self.cut.ref


def stands_alone(edit: Edit) -> bool:
    """Whether no later turn could be sent as an edit of `edit`'s request: it is a first
    attempt with no base, and none of its messages has `RELATED_MIN` bytes (a later request
    is related to a recipe by such a message only, `Recipes.best_base`). O(messages)."""
    if edit.base is not None or edit.resends:
        return False
    made = edit.cut
    return all(len(made.segments[index]) < RELATED_MIN for index in made.messages)


def header_bytes(pairs: Iterable[tuple[str, str]]) -> int:
    """The bytes of header lines on the wire (HTTP/1.1: `name: value` and CRLF, each), names
    and values as text, each byte a latin-1 character."""
    return sum(len(name) + len(value) + 4 for name, value in pairs)


def edit_bytes(edit: Edit) -> int:
    """The bytes `edit` puts on the wire: its headers (the media type, the credentials) and
    its body."""
    return header_bytes(edit.headers) + len(edit.body)


def as_it_came_bytes(edit: Edit, beside: Iterable[tuple[str, str]] = ()) -> int:
    """The bytes the request `edit` stands for puts on the wire as it came: its header lines
    (segment 0, each credential with its value) and its body, and `beside`, the headers it
    carries that the edit does not (a sender's offer). Headers both carry (the hop's,
    toolref's own) are counted on neither side; `edit_bytes` is its other side."""
    made = edit.cut
    values = sum(len(value) + 1 for _, value in made.secrets)  # `name:` -> `name: value`
    return made.size + values + header_bytes(beside)


def not_worth_an_edit(edit: Edit, plain: int, sent: int | None = None) -> bool:
    """Whether `edit` goes as its request came (the module docstring): it `stands_alone` and
    puts more bytes on the wire than the request as it came, `plain` of them (counted as
    `sent` is: by default `as_it_came_bytes` against `edit_bytes`). The rule of every
    sender, Python's and JS's (`notWorthAnEdit`), so that both send the same bytes."""
    if not stands_alone(edit):
        return False
    return (edit_bytes(edit) if sent is None else sent) > plain


class _Held:
    """Pieces of any confirmed recipe, but those the gateway said it lacks."""

    def __init__(self, recipes: Recipes, unheld: frozenset[bytes]) -> None:
        self.recipes, self.unheld = recipes, unheld

    def __contains__(self, piece: object) -> bool:
        return isinstance(piece, bytes) and self.recipes.holds(piece) and piece not in self.unheld


class Editor:
    """One client's edits (see the module docstring). max_recipes / max_bytes: the bound of
    the recipes kept (`recipes.Recipes`). Not thread-safe: one event loop."""

    def __init__(
        self,
        max_recipes: int = DEFAULT_MAX_RECIPES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        size_guard: bool = True,
        version: int = wire.VERSION,
        long_window: bool = True,
    ) -> None:
        if version not in wire.VERSIONS:
            raise ValueError(f"edits of version {version}: this SDK writes {wire.VERSIONS}")
        self.recipes = Recipes(max_recipes, max_bytes)
        self.answers: OrderedDict[str, bytes] = OrderedDict()  # recipe ref -> its answer
        self.rendered: dict[str, int] = {}  # kept recipe's ref -> its request's messages
        self.max_answers = max(1, max_recipes)
        self.size_guard = size_guard
        self.long_window = long_window  # long messages cut again (`window.windowed`)
        self.version = version  # the highest the gateway reads (its capabilities' `edits`)

    def prepare(
        self,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        messages_key: str | None,
        most: int = MAX_ENTRIES,
    ) -> Edit | None:
        """The first attempt of a request; None when its body is not one JSON object in
        UTF-8, or its recipe would hold more than `most` entries (send it as it is: by
        default `MAX_ENTRIES`, a receiver's; lower where one said less, `entries.Entries`).
        `headers`: the agent's end-to-end headers, toolref's own left out."""
        # The long window pays only where its pieces travel together (version 3's runs).
        made = cut(headers, body, messages_key, window=self._window)
        if made is None or len(made.entries) > min(most, MAX_ENTRIES):
            return None
        base = self._resumed(made) or self.recipes.best_base(
            made.entries, made.segments, made.messages
        )
        if base is None:
            return self._build(made, None)
        self.recipes.touch(base.ref)
        return self._build(made, base)

    def new_bytes(self, body: bytes, messages_key: str | None) -> int:
        """What `prepare` would work on in Python: the bytes of `body` after the prefix it
        shares with a body cut before (`bodycut.unshared`, a comparison at C speed); a
        caller puts a body in a worker thread by this, not by its size."""
        return unshared(body, messages_key, window=self._window)

    @property
    def _window(self) -> bool:
        return self.long_window and self.version >= 3

    def confirm(self, edit: Edit, history: str | None) -> bool:
        """Keep the recipe `edit` made when the answer names it (`Toolref-History`);
        whether it did."""
        if history is None or history.strip() != edit.ref:
            return False
        made = edit.cut
        base = self.recipes.get(edit.base) if edit.base is not None else None
        same = made.same if base is not None and base.ref == made.resumed else 0
        tail = made.entries[made.messages[-1]] if made.messages else None
        kept = self.recipes.keep(
            made.ref, made.entries, made.segments, base=base, same=same, size=made.size, tail=tail
        )
        if kept:
            self.rendered[made.ref] = len(made.messages)  # the next message renders its answer
        if (
            kept
            and base is not None
            and base.ref != made.ref
            and self.recipes.continues(made.ref, base, edit.kept)
        ):
            self.recipes.drop(base.ref)
        self._trim_answers()
        return kept

    def answered(self, ref: str, answer: bytes | None) -> None:
        """The answer the request of recipe `ref` streamed (None: none whole); the next
        edit of it compresses the model's segments against it (module docstring)."""
        if answer is None:
            self.answers.pop(ref, None)
            return
        self.answers.pop(ref, None)
        self.answers[ref] = answer
        self._trim_answers()

    def _trim_answers(self) -> None:
        """The answers of kept recipes only, counted with them in `max_bytes`: past it, the
        least recently used recipes go (their answers with them), as for a recipe kept,
        then the oldest answers; and no more than `max_answers`."""
        while True:
            for ref in [ref for ref in self.answers if ref not in self.recipes]:
                del self.answers[ref]
            for ref in [ref for ref in self.rendered if ref not in self.recipes]:
                del self.rendered[ref]
            held = sum(map(len, self.answers.values()))
            if self.recipes.held_bytes + held <= self.recipes.max_bytes or len(self.recipes) < 2:
                break
            self.recipes.drop(next(iter(self.recipes)))
        while self.answers and (
            len(self.answers) > self.max_answers
            or self.recipes.held_bytes + held > self.recipes.max_bytes
        ):
            held -= len(self.answers.popitem(last=False)[1])

    def _resumed(self, made: Cut) -> Recipe | None:
        """A base found without a pass over the request: the recipe of the body this one
        was cut on from (`Cut.resumed`), when it is confirmed, the segments both hold at
        the same places are at least `RESUMED_SHARE` of the request's bytes, and they hold
        one of its messages of `RELATED_MIN` bytes or more (the same conversation), and no
        entry it does not hold is held by another recipe (`Recipes.rivalled`: a look-up of
        each entry the turn added). Then no other recipe shares more, and this is the base
        `best_base` would choose; else (a branch taken again, a retry, an undo: the body
        before's recipe lacks what an older one holds) the pass over the request chooses.
        Before, such a turn went against the body before's recipe: 170 bytes where the
        pass sent 94, and the JS SDK, which has no resumed path, sent other bytes. The sizes
        the cut counted, the messages up to the first long one, then the entries after
        those both hold at the same places."""
        if made.resumed is None or made.same == 0:
            return None
        base = self.recipes.get(made.resumed)
        if base is None:
            return None
        end = 1 + made.same
        if made.same_bytes < RESUMED_SHARE * made.size:
            return None
        for index in made.messages:
            if index >= end:
                return None
            if len(made.segments[index]) >= RELATED_MIN:
                break
        else:
            return None
        if self.recipes.rivalled(base, made.entries, end, made.segments, made.messages):
            return None  # an older recipe holds what it added: the pass over it decides
        return base

    def on_miss(self, edit: Edit, status: int, problem: Mapping[str, Any] | None) -> Edit | None:
        """The next attempt after a problem the editor resends on; None for any other
        answer (it is the agent's), or once `MAX_RESENDS` were made."""
        kind = problem.get("type") if problem is not None else None
        if edit.resends >= MAX_RESENDS or kind is None:
            return None
        base = self.recipes.get(edit.base) if edit.base is not None else None
        unheld, plain = edit.unheld, edit.plain
        if status == 409 and kind == MISSING_HISTORY:
            if base is not None:
                self.recipes.drop(base.ref)
            base = None
        elif status == 409 and kind == MISSING_PIECES:
            listed = problem.get("missingPieces") if problem is not None else None
            lacking = [parse_piece_ref(ref) for ref in listed] if isinstance(listed, list) else []
            found = [piece for piece in lacking if piece is not None]
            self.recipes.drop_holding(found)
            unheld = unheld | frozenset(found)
            base = self.recipes.get(base.ref) if base is not None else None
        elif status == 400 and kind == DICTIONARY_MISMATCH:
            plain = True
        else:
            return None
        resends = edit.resends + 1
        if resends == MAX_RESENDS:
            return self._build(edit.cut, None, resends=resends, whole=True)
        return self._build(edit.cut, base, resends=resends, unheld=unheld, plain=plain)

    def _build(
        self,
        made: Cut,
        base: Recipe | None,
        *,
        resends: int = 0,
        unheld: frozenset[bytes] = frozenset(),
        plain: bool = False,
        whole: bool = False,
    ) -> Edit:
        held: _Held | tuple[()] = () if whole else _Held(self.recipes, unheld)
        entries = base.entries if base is not None else ()
        first = base.first if base is not None else None
        same = (1, 1 + made.same) if base is not None and base.ref == made.resumed else (0, 0)
        ops = diff(entries, made.entries, made.segments, held, first=first, same=same)
        inline = sum(len(op.data) for op in ops if isinstance(op, Inline))
        ref = base.ref if base is not None else None
        body = self._encoded(ref, base, ops, inline, plain=plain, made=made)
        headers = (("Content-Type", wire.MEDIA_TYPE), *made.secrets)
        kept = 0  # what `Recipes.continues` weighs
        if base is not None:
            size, segments = self.recipes.entry_size, made.segments
            kept = kept_bytes(entries, ops, size, segments, same=same, same_bytes=made.same_bytes)
        return Edit(
            made, body, headers, ref, kept, inline, resends, unheld, plain, whole, self.version
        )

    def _encoded(
        self,
        ref: str | None,
        base: Recipe | None,
        ops: list[Op],
        inline: int,
        *,
        plain: bool,
        made: Cut,
    ) -> bytes:
        """The edit's bytes: size-guarded (see the module docstring; toward version 1, the
        inline bytes as they are), else the inline bytes against the base's; as they are
        when that is smaller."""
        if self.size_guard and self.version >= 2:
            answer = self.answers.get(ref, b"") if ref is not None and not plain else b""
            runs = _runs(ops, made.owners) if made.owners and not plain else []
            splits = _inline_splits(ops, made.splits) if made.splits else {}
            if (not answer and not runs) or self.version < 3:
                return wire.encode_isolated(ref, ops, version=self.version, splits=splits)
            count = self.rendered.get(ref) if ref is not None and answer else None
            rendering = _rendering(made, count)
            models = _inline_positions(ops, rendering) if rendering else frozenset()
            return wire.encode_isolated(
                ref,
                ops,
                answer=answer,
                answered=models,
                runs=runs,
                version=self.version,
                splits=splits,
            )
        body = wire.encode(ref, ops, None)  # as they are
        if inline and not self.size_guard:  # guarded toward version 1: as they are
            words = b""
            if base is not None and not plain:
                words = self._dictionary(base, ops, inline)
            packed = wire.encode(ref, ops, words)
            if len(packed) < len(body):
                body = packed
        return body

    def _dictionary(self, base: Recipe, ops: list[Op], inline: int) -> bytes:
        size = min(base.size, max(MIN_DICTIONARY, DICTIONARY_PER_INLINE * inline), MAX_DICTIONARY)
        order = dictionary_order(len(base.entries), ops)
        return dictionary(order, lambda index: self.recipes.segment(base, index), size)


def _placed(ops: list[Op]) -> list[int]:
    """The index in the request's segments of each inline op, in order. O(ops)."""
    found: list[int] = []
    at = 0
    for op in ops:
        if isinstance(op, Inline):
            found.append(at)
        at += op.end - op.start if isinstance(op, Keep) else 1
    return found


def _inline_positions(ops: list[Op], segments: frozenset[int]) -> frozenset[int]:
    """Which inline ops, counted from 0, carry one of `segments` (indices in the request's
    segments). O(ops)."""
    return frozenset(n for n, at in enumerate(_placed(ops)) if at in segments)


def _inline_splits(
    ops: list[Op], splits: Mapping[int, tuple[int, ...]]
) -> dict[int, tuple[int, ...]]:
    """`Cut.splits` for the inline ops, counted from 0 (a segment shared by a message's
    tool results: its pieces each compressed alone). O(ops)."""
    return {n: splits[at] for n, at in enumerate(_placed(ops)) if at in splits}


def _rendering(made: Cut, count: int | None) -> frozenset[int]:
    """The segments of the model's messages that render the answer of a base whose request
    held `count` messages: the request's message `count` (from 0), when it is the model's,
    and when it is an OpenAI Responses item of the model's (`Cut.items`: reasoning, a
    call, an assistant `message`), the items after it up to the first that is none (a
    tool's output, a user's message): the answer's output items, written back in order.
    None else; never a message before `count`, nor a tool's output. With the long window,
    those they own; without, the model's segments between the run's neighbours' when
    neither is the model's (else none: whose they are is not known). O(model segments and
    the run)."""
    messages = made.messages
    if count is None or count >= len(messages) or messages[count] not in made.answered:
        return frozenset()
    end = count + 1  # the run's end: one message, or the items of the answer
    if count in made.items:
        while end < len(messages) and end in made.items:
            end += 1
    if made.owners:
        return frozenset(at for at in made.answered if count <= made.owners[at] < end)
    before = messages[count - 1] if count > 0 else 0
    after = messages[end] if end < len(messages) else len(made.segments)
    if before in made.answered or after in made.answered:
        return frozenset()
    return frozenset(at for at in made.answered if before < at < after)


def _runs(ops: list[Op], owners: Sequence[int]) -> list[tuple[int, int]]:
    """(first, count) of each run of inline ops, counted from 0, that carry adjacent
    segments of one message (the long window's pieces of it): compressed as one frame,
    which tells no more of the conversation than the message compressed whole did.
    O(ops)."""
    found: list[tuple[int, int]] = []
    last = owner = -1
    for n, at in enumerate(_placed(ops)):
        mine = owners[at] if at < len(owners) else -1
        if mine >= 0 and mine == owner and at == last + 1:
            first, count = found[-1]
            found[-1] = (first, count + 1)
        else:
            found.append((n, 1))
        last, owner = at, mine
    return [run for run in found if run[1] > 1]
