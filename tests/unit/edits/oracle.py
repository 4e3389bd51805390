"""A registry's side of the edits protocol written with the pure core (`toolref.edits`:
`wire.read`, `needed`, `wire.inline`, `edit.apply`, `request.restore`), in memory, in
the spec's steps (/work/notes/edits-spec.md "What the gateway does"): the oracle the
editor's tests check every turn against, and `send`, one turn through an editor to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolref.edits import wire
from toolref.edits.answer import answer_id
from toolref.edits.edit import (
    EditError,
    Inline,
    Keep,
    Named,
    Op,
    apply,
    dictionary,
    dictionary_order,
)
from toolref.edits.recipe import is_piece, literal_of, piece_of, piece_ref, recipe_ref
from toolref.edits.request import restore
from toolref.sending.editor import Edit, Editor
from toolref.wire.errors import (
    DictionaryMismatchError,
    MissingHistoryError,
    MissingPiecesError,
    ToolrefError,
)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    problem: dict[str, Any] | None = None
    history: str | None = None
    headers: list[tuple[str, str]] | None = None
    body: bytes | None = None


@dataclass
class Registry:
    """Recipes (entries) and pieces (bytes), as Redis would hold them for one tenant."""

    recipes: dict[str, list[bytes]] = field(default_factory=dict)
    pieces: dict[bytes, bytes] = field(default_factory=dict)
    received: int = 0  # edit bytes received, every attempt
    answers: dict[str, bytes] = field(default_factory=dict)  # recipe -> its request's answer

    def flush(self) -> None:
        """The registry restarted empty."""
        self.recipes.clear()
        self.pieces.clear()

    def segment(self, entry: bytes) -> bytes | None:
        return self.pieces.get(piece_of(entry)) if is_piece(entry) else literal_of(entry)

    def answer(self, body: bytes, secrets: Sequence[tuple[str, str]]) -> Answer:
        """The spec's steps 2 to 10 (nothing stored on any refusal)."""
        self.received += len(body)
        header, blob = wire.read(body, 1 << 30)
        base: list[bytes] = []
        if header.base is not None:
            found = self.recipes.get(header.base)
            if found is None:
                return _problem(MissingHistoryError("no such base", header.base))
            base = found
        ops: list[Op] = [Inline(b"") if isinstance(op, int) else op for op in header.ops]
        words = b""
        if header.dictionary:
            order = dictionary_order(len(base), ops)
            sizes = {i: len(self.segment(base[i]) or b"") for i in range(len(base))}
            wanted = needed(order, sizes.__getitem__, header.dictionary)
            if any(self.segment(base[i]) is None for i in wanted):
                return _problem(MissingHistoryError("the base is incomplete", header.base or ""))
            words = dictionary(order, lambda i: self.segment(base[i]) or b"", header.dictionary)
        held = self.answers.get(header.base) if header.base is not None else None
        if header.answer is not None and (held is None or answer_id(held) != header.answer):
            return _problem(DictionaryMismatchError(f"no answer {header.answer} held"))
        try:
            inline = iter(wire.inline(header, blob, words, None, held))
        except DictionaryMismatchError as exc:
            return _problem(exc)
        ops = [Inline(next(inline)) if isinstance(op, int) else op for op in header.ops]
        try:
            entries = apply(base, ops)
        except EditError as exc:
            return Answer(400, {"type": "bad-edit", "detail": str(exc)})
        lacking = [
            piece_ref(op.piece)
            for op in ops
            if isinstance(op, Named) and op.piece not in self.pieces
        ]
        if lacking:
            return _problem(MissingPiecesError("lacking", lacking))
        segments: list[bytes] = []
        for op in ops:
            if isinstance(op, Keep):
                parts = [self.segment(entry) for entry in base[op.start : op.end]]
                if any(part is None for part in parts):
                    return _problem(MissingHistoryError("incomplete", header.base or ""))
                segments += [part or b"" for part in parts]
            elif isinstance(op, Named):
                segments.append(self.pieces[op.piece])
            else:
                segments.append(op.data)
        restored = restore(segments, secrets)
        if restored is None:
            return Answer(400, {"type": "bad-headers"})
        for entry, data in zip(entries, segments, strict=True):
            if is_piece(entry):
                self.pieces[piece_of(entry)] = data
        ref = recipe_ref(entries)
        self.recipes[ref] = entries
        return Answer(200, None, ref, restored.headers, restored.body)


def _problem(exc: ToolrefError) -> Answer:
    return Answer(exc.status, exc.to_problem())


@dataclass(frozen=True, slots=True)
class Turn:
    """One request through an editor: what the registry made of it, every attempt's bytes."""

    answer: Answer
    sent: list[int]  # bytes of each attempt's body
    headers: int  # bytes of the last attempt's headers beyond the request's credentials
    kept: bool  # the editor kept the recipe (within its bounds)


def send(
    editor: Editor,
    registry: Registry,
    headers: list[tuple[str, str]],
    body: bytes,
    key: str = "messages",
) -> Turn:
    """A request through `editor` to `registry`, resends included, as the relay sends it
    (`key`: the body's messages key)."""
    edit = editor.prepare(headers, body, key)
    assert edit is not None
    return deliver(editor, registry, edit)


def deliver(editor: Editor, registry: Registry, edit: Edit) -> Turn:
    """`edit` (its first attempt, made by `editor`) to `registry`, resends included, each
    answer told to `editor` as the relay tells it."""
    sent: list[int] = []
    while True:
        sent.append(len(edit.body))
        answer = registry.answer(edit.body, edit.cut.secrets)
        if answer.status == 200:
            kept = editor.confirm(edit, answer.history)
            extra = sum(len(k) + len(v) + 4 for k, v in edit.headers) - sum(
                len(k) + len(v) + 4 for k, v in edit.cut.secrets
            )
            return Turn(answer, sent, extra, kept)
        following = editor.on_miss(edit, answer.status, answer.problem)
        assert following is not None, answer
        edit = following


def needed(order: Sequence[int], sizes: Callable[[int], int], size: int) -> list[int]:
    """The base entries `dictionary` reads for `size` bytes (to fetch them first)."""
    found: list[int] = []
    left = size
    for index in reversed(order):
        if left <= 0:
            break
        found.append(index)
        left -= sizes(index)
    return found
