"""A body cut on from a remembered cut (`toolref.edits.bodycut`: the segments of the prefix
two bodies share taken as they were, the rest cut) is exactly the cut made from scratch:
the same segments, entries, digests, messages, model spans and owners, whatever the body
before was (the conversation grown, changed at its tail, a role said after a shared prefix,
another conversation); and a grown conversation reuses all but its tail."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from tests.unit.edits.test_scanner import GROWN, Grown
from tests.unit.edits.test_scanner import body as short_body
from toolref.edits import bodycut
from toolref.edits.recipe import entry_of, framed
from toolref.edits.request import cut
from toolref.edits.segments import cut_body as cut_str


def body(messages: list[Any], tail: dict[str, Any], spacing: str) -> str:
    """`test_scanner`'s body, its system prompt long enough for every body to be resumed."""
    return short_body(messages, tail, spacing).replace("s" * 300, "s" * 1500, 1)


def fresh(text: str, window: bool) -> bodycut.BodyCut | None:
    bodycut.forget()
    return bodycut.cut_body(text.encode(), "messages", window=window)


def made(found: bodycut.BodyCut | None) -> tuple[Any, ...] | None:
    if found is None:
        return None
    return (found.parts[1:], found.entries[1:], found.framed, found.messages,
            found.answered, found.owners, found.spans, found.through, found.byte_ends,
            found.framed_ends, found.splits, found.items)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(GROWN)
def test_a_resumed_cut_is_the_cut_from_scratch(grown: Grown) -> None:
    before, after = grown.bodies(body)
    window = grown.window
    fresh(before, window)
    resumed = bodycut.cut_body(after.encode(), "messages", window=window)
    again = fresh(after, window)
    assert made(resumed) == made(again)
    if resumed is not None:  # what the parts are: the text, and each one's entry and digest
        parts = resumed.parts[1:]  # slot 0 is the headers' (`request.cut` fills it)
        assert b"".join(parts) == after.encode()
        assert resumed.text == after
        assert list(resumed.byte_ends) == [
            len(b"".join(resumed.parts[:count])) for count in resumed.through
        ]
        assert resumed.entries[1:] == [entry_of(part) for part in parts]
        assert resumed.framed == b"".join(framed(entry) for entry in resumed.entries[1:])
        assert list(resumed.framed_ends) == [
            len(b"".join(framed(e) for e in resumed.entries[1:count])) for count in resumed.through
        ]
        assert resumed.reused_bytes == len(b"".join(parts[: resumed.reused]))
        if not window:  # the segments `segments.cut_body` gives
            assert [part.decode() for part in parts] == cut_str(after, "messages")


def test_a_grown_conversation_is_cut_again_only_at_its_tail() -> None:
    messages = [{"role": "user", "content": f"message {n} " * 50} for n in range(200)]
    headers = [("content-type", "application/json")]
    fresh(body(messages, {}, ""), True)
    first = cut(headers, body(messages, {}, "").encode(), "messages", window=True)
    assert first is not None
    assert first.resumed is None  # the same body again: every segment but the last
    grown = [*messages, {"role": "assistant", "content": "done"}]
    second = cut(headers, body(grown, {"stream": True}, "").encode(), "messages", window=True)
    assert second is not None
    assert second.resumed == first.ref
    assert second.same >= len(first.segments) - 3  # all but the list's end and what follows
    assert second.segments[: 1 + second.same] == first.segments[: 1 + second.same]
    bodycut.forget()
    scratch = cut(headers, body(grown, {"stream": True}, "").encode(), "messages", window=True)
    assert scratch is not None
    assert scratch.same == 0
    assert (scratch.segments, scratch.entries, scratch.ref, scratch.messages) == (
        second.segments, second.entries, second.ref, second.messages)  # fmt: skip
    assert (scratch.answered, scratch.owners) == (second.answered, second.owners)


def test_conversations_that_share_their_envelope_keep_their_own_cuts() -> None:
    fresh("{}", False)
    tasks = [[{"role": "user", "content": f"task {n}: " + "do it. " * 40}] for n in range(3)]
    for turn in range(4):  # three agents of one kind, their turns interleaved
        for task in tasks:
            task.append({"role": "assistant", "content": f"step {turn} " * 30})
            found = bodycut.cut_body(body(task, {}, "").encode(), "messages", window=False)
            assert found is not None
            if turn:  # cut on from its own body before: all but the new message
                assert found.reused == len(found.parts) - 4  # slot 0; a comma, it, the end
    assert len(bodycut._MEMOS) == 1 + 3  # "{}", and one cut per conversation


def test_the_memory_is_bounded() -> None:
    bodycut.forget()
    for n in range(3 * bodycut.MEMOS):
        text = body([{"role": "user", "content": f"{n} " * 600}], {}, "")
        bodycut.cut_body(text.encode(), "messages", window=False)
    assert len(bodycut._MEMOS) == bodycut.MEMOS
    assert sum(len(m.text) for m in bodycut._MEMOS) <= bodycut.MEMO_CHARS
