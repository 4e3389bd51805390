"""A minimal edit sender for the gateway's tests: what `toolref.sending.editor` does, written
with the pure core alone (`request.cut`, `edit.diff`, `edit.dictionary`, `wire.encode`), so
the server side is tested against the spec, not against the relay's code.

It edits the last recipe the gateway confirmed, names pieces of any confirmed recipe, and
compresses the inline bytes against the base (the suggested size), unless told otherwise.
On a miss it resends as the spec says (no base; those pieces inline; no dictionary), and
records every answer so tests can count resends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from toolref.edits import wire
from toolref.edits.edit import Inline, Named, Op, dictionary, dictionary_order, diff
from toolref.edits.recipe import is_piece, parse_piece_ref, piece_of
from toolref.edits.request import Cut, cut
from toolref.wire.headers import HISTORY_HEADER

AGENT_HEADERS = [
    ("Content-Type", "application/json"),
    ("x-api-key", "sk-provider-secret"),
    ("anthropic-version", "2023-06-01"),
    ("User-Agent", "claude-cli/2.1.3 (external, cli)"),
    ("anthropic-beta", "interleaved-thinking-2025-05-14,fine-grained-tool-streaming"),
    ("X-Stainless-Lang", "js"),
]


def suggested(base: Cut, inline: int) -> int:
    """The dictionary size the spec suggests."""
    return min(sum(map(len, base.segments)), max(32 << 10, 32 * inline), 1 << 20)


def encoded(
    base: Cut | None, new: Cut, held: set[bytes], *, z: bool = True
) -> tuple[bytes, list[Op]]:
    """The edit of `new` against `base` on the wire."""
    if base is None:
        ops = diff([], new.entries, new.segments, held)
        return wire.encode(None, ops, b"" if z else None), ops
    ops = diff(base.entries, new.entries, new.segments, held)
    words = None
    if z:
        inline = sum(len(op.data) for op in ops if isinstance(op, Inline))
        order = dictionary_order(len(base.entries), ops)
        words = dictionary(order, base.segments.__getitem__, suggested(base, inline))
    return wire.encode(base.ref, ops, words), ops


@dataclass
class EditClient:
    http: httpx.AsyncClient
    path: str  # /llm/{name}/{path}
    headers: Sequence[tuple[str, str]] = tuple(AGENT_HEADERS)
    messages_key: str = "messages"
    extra: dict[str, str] = field(default_factory=dict)  # toolref's own (the key)
    last: Cut | None = None
    held: set[bytes] = field(default_factory=set)
    answers: list[httpx.Response] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)

    def cut(self, body: bytes) -> Cut:
        made = cut(self.headers, body, self.messages_key)
        assert made is not None
        return made

    async def post(self, data: bytes, secrets: Sequence[tuple[str, str]]) -> httpx.Response:
        headers = [("content-type", wire.MEDIA_TYPE), *secrets, *self.extra.items()]
        answer = await self.http.post(self.path, content=data, headers=headers)
        self.answers.append(answer)
        self.sent.append(data)
        return answer

    async def send(self, body: bytes) -> httpx.Response:
        """One turn as an edit of the last recipe confirmed, resent on a miss as the spec
        says (at most 3 resends)."""
        new = self.cut(body)
        chosen = self.last
        data, ops = encoded(chosen, new, self.held)
        answer = await self.post(data, new.secrets)
        for _ in range(3):
            if answer.status_code not in (400, 409):
                break
            problem: dict[str, Any] = answer.json()
            slug = problem["type"].rsplit(":", 1)[-1]
            if slug == "missing-history":
                data, ops = encoded(None, new, self.held)
            elif slug == "missing-pieces":
                gone = {parse_piece_ref(ref) for ref in problem["missingPieces"]}
                ops = [
                    _inline(op, new) if isinstance(op, Named) and op.piece in gone else op
                    for op in ops
                ]
                data = wire.encode(wire.read(data, 1 << 30)[0].base, ops, None)
            elif slug == "dictionary-mismatch":
                data, ops = encoded(chosen, new, self.held, z=False)
            else:
                break
            answer = await self.post(data, new.secrets)
        if answer.status_code < 300:
            assert answer.headers[HISTORY_HEADER] == new.ref
            self.last = new
            self.held.update(piece_of(e) for e in new.entries if is_piece(e))
        return answer


def _inline(op: Named, new: Cut) -> Op:
    for entry, segment in zip(new.entries, new.segments, strict=True):
        if is_piece(entry) and piece_of(entry) == op.piece:
            return Inline(segment)
    raise AssertionError("a named piece the request does not hold")
