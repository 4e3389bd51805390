"""Transcripts: a manager that keeps them uploads exactly what one computing every turn from
scratch uploads, whatever happens to the conversations between turns; and a turn's work is
proportional to its new messages."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolref import ToolReferenceManager, formats
from toolref.history import chain_form, dictionary, heads, history_ref
from toolref.registry.exchange import Exchange
from toolref.sending import transcript
from toolref.sending.rewrite import ref_of
from toolref.sending.transcript import Transcripts, key_of, keys_of, transcribe
from toolref.wire.canonical import canonical_json
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import DictionaryMismatchError, MissingHistoryError, MissingRefsError
from toolref.wire.headers import HISTORY_HEADER

from .format_strategies import CONVERSATIONS, LONG_TEXT, SCALARS, STRINGS
from .test_history import conversation

Messages = list[dict[str, Any]]


def build(content: bytes, headers: dict[str, str]) -> httpx.Request:
    return httpx.Request("POST", "http://chat.test/chat", content=content, headers=headers)


def head_of(messages: Messages, requested: Any) -> str | None:
    """The head an honest server confirms for the whole conversation (computed from scratch)."""
    try:
        fmt = formats.detect(messages, requested)
        return history_ref(heads(chain_form(messages, fmt))[-1])
    except (ValueError, TypeError):
        return None


def refs_in(messages: Messages, requested: Any) -> list[str]:
    try:
        fmt = formats.detect(messages, requested)
        return [ref_of(pair) for pair in formats.scan(messages, fmt).complete]
    except (ValueError, TypeError):
        return []


def problem(kind: type[Exception], status: int, **members: Any) -> httpx.Response:
    slug = kind.slug  # type: ignore[attr-defined]
    body = {"type": f"urn:toolref:problem:{slug}", "title": "x", "status": status, **members}
    return httpx.Response(
        status,
        json=body,
        headers={"Content-Type": "application/problem+json", "Toolref-Protocol": "2"},
    )


ANSWERS = ("confirm", "confirm", "confirm", "plain", "protocol-1", "lost", "mismatch", "refs")


def answer(kind: str, head: str | None, refs: list[str], draw: Callable[..., Any]) -> Any:
    if kind == "confirm":
        headers = {"Toolref-Protocol": "2"}
        if head is not None:
            headers[HISTORY_HEADER] = head
        if refs and draw(st.booleans()):
            known = draw(st.lists(st.sampled_from(refs), max_size=3))
            headers["Toolref-References"] = json.dumps({f"k{n}": r for n, r in enumerate(known)})
        return httpx.Response(200, json={"ok": True}, headers=headers)
    if kind == "plain":
        return httpx.Response(200, json={"ok": True}, headers={"Toolref-Protocol": "2"})
    if kind == "protocol-1":
        return httpx.Response(200, json={"ok": True})
    if kind == "lost":
        return problem(MissingHistoryError, 409)
    if kind == "mismatch":
        return problem(DictionaryMismatchError, 400)
    missing = draw(st.lists(st.sampled_from(refs), max_size=2)) if refs else []
    return problem(MissingRefsError, 409, missingRefs=missing)


def step(exchange: Exchange[httpx.Response], response: httpx.Response | None) -> tuple[str, Any]:
    """What an exchange does next: yields a request, returns, or raises."""
    try:
        request = next(exchange) if response is None else exchange.send(response)
    except StopIteration as stop:
        return "returned", stop.value.status_code
    except Exception as exc:  # both managers must fail alike
        return "raised", type(exc)
    assert isinstance(request, httpx.Request)
    return "request", (request.content, dict(request.headers))


def lockstep(
    managers: list[ToolReferenceManager],
    body: dict[str, Any],
    requested: Any,
    draw: Callable[..., Any],
) -> None:
    """One turn through every manager, each given the same answers: their requests must be
    the same bytes, with the same headers, every attempt."""
    messages = body["messages"]
    exchanges = [m.exchange(build, body, format=requested) for m in managers]
    outcomes = [step(e, None) for e in exchanges]
    head, refs = head_of(messages, requested), refs_in(messages, requested)
    while True:
        assert all(o == outcomes[0] for o in outcomes), "the managers sent different requests"
        if outcomes[0][0] != "request":
            return
        response = answer(draw(st.sampled_from(ANSWERS)), head, refs, draw)
        outcomes = [step(e, response) for e in exchanges]


# --- what happens to a conversation between turns ------------------------------------------

ODD_VALUES = st.one_of(
    SCALARS,
    STRINGS,
    LONG_TEXT,
    st.just(2**70),  # past 64 bits: orjson refuses it, the stdlib writes it
    st.just(-0.0),
    st.just(1e-7),
    st.just({1: "a key that is not a str"}),  # the stdlib writes "1"; canonical JSON refuses
    st.just("lone \ud800 surrogate"),  # no UTF-8: the stdlib's bytes fail, as before
    st.just({"nested": ["list", {"deep": True}]}),
)


def containers(value: Any) -> list[Any]:
    """Every dict and list inside `value` (itself included), to mutate one in place."""
    found: list[Any] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
    return found


def mutate_in_place(message: dict[str, Any], draw: Callable[..., Any]) -> None:
    target = draw(st.sampled_from(containers(message)))
    value = draw(ODD_VALUES)
    if isinstance(target, dict):
        keys = list(target)
        if keys and draw(st.booleans()):
            key = draw(st.sampled_from(keys))
            if target is message or draw(st.booleans()):
                target[key] = value
            else:
                del target[key]
        else:
            target[draw(st.sampled_from(["extra", "text", "x"]))] = value
    elif target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = value
    else:
        target.append(value)


class Conversation:
    def __init__(self, source: Messages, fmt: str) -> None:
        self.source, self.format, self.next = source, fmt, 0
        self.messages: Messages = []

    def append(self, count: int) -> None:
        new = self.source[self.next : self.next + count]
        self.next += len(new)
        self.messages.extend(copy.deepcopy(new))
        if not new:
            self.messages.append({"role": "user", "content": f"more {len(self.messages)}"})


def change(talk: Conversation, draw: Callable[..., Any]) -> None:
    """One thing a client does to its conversation before the next turn."""
    messages = talk.messages
    kind = draw(
        st.sampled_from(
            ["append", "append", "append", "same", "edit", "mutate", "truncate", "swap", "drop"]
        )
    )
    if kind == "append" or not messages:
        talk.append(draw(st.integers(1, 4)))  # a call and its result may come turns apart
        return
    at = draw(st.integers(0, len(messages) - 1))
    if kind == "edit":  # a new object in its place
        messages[at] = {**messages[at], draw(st.sampled_from(["extra", "role"])): draw(ODD_VALUES)}
    elif kind == "mutate":  # the same object, changed
        mutate_in_place(messages[at], draw)
    elif kind == "truncate":
        del messages[at:]
    elif kind == "swap":
        other = draw(st.integers(0, len(messages) - 1))
        messages[at], messages[other] = messages[other], messages[at]
    elif kind == "drop":
        del messages[at]


OPTIONS = st.fixed_dictionaries(
    {
        "optimistic": st.booleans(),
        "compress": st.sampled_from([None, True, False]),
        "history_refs": st.sampled_from([True, True, True, False]),
        "max_histories": st.sampled_from([1, 2, 64]),
        "max_refs": st.sampled_from([2, 100_000]),
        "track_savings": st.booleans(),
    }
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data(), OPTIONS, st.sampled_from([1, 2, 3]), st.sampled_from([64 << 20, 4000]))
def test_a_kept_transcript_uploads_what_a_fresh_computation_uploads(
    data: st.DataObject, options: dict[str, Any], kept: int, size: int
) -> None:
    draw = data.draw
    cached = ToolReferenceManager(**options, max_transcripts=kept, max_transcript_bytes=size)
    fresh = ToolReferenceManager(**options, max_transcripts=0)
    talks: list[Conversation] = []
    for _ in range(draw(st.integers(1, 3))):
        drawn = draw(st.sampled_from(list(CONVERSATIONS)).flatmap(CONVERSATIONS.__getitem__))
        talks.append(Conversation(drawn.messages, drawn.format))
    if draw(st.booleans()):  # two conversations with one beginning
        talks.append(Conversation(talks[0].source, talks[0].format))
    for _ in range(draw(st.integers(1, 12))):
        talk = draw(st.sampled_from(talks))
        change(talk, draw)
        if not talk.messages:
            talk.append(1)
        body = {"model": "m", "messages": talk.messages, "temperature": 0.5}
        requested = talk.format if draw(st.integers(0, 4)) == 0 else None
        lockstep([cached, fresh], body, requested, draw)
    assert cached.histories == fresh.histories
    assert cached.confirmed == fresh.confirmed
    assert cached.seen == fresh.seen
    assert cached.savings == fresh.savings
    assert len(cached.transcripts) <= kept
    assert cached.transcripts.size <= size
    assert not fresh.transcripts


# --- a turn's work ------------------------------------------------------------------------------


class Counter:
    """Calls of the functions whose work grows with what they are given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.canonical = self.scanned = self.written = 0
        real_canonical, real_scan = canonical_json, formats.scan
        real_dumps = dumps_json

        def counted_canonical(value: object) -> bytes:
            self.canonical += 1
            return real_canonical(value)

        def counted_scan(messages: Any, fmt: Any) -> Any:
            self.scanned += len(messages)
            return real_scan(messages, fmt)

        def counted_dumps(value: Any) -> bytes:
            self.written += 1
            return real_dumps(value)

        # Where each is looked up: digests (canonical), heads (history, transcript), scans.
        for module in ("toolref.wire.canonical", "toolref.history", "toolref.sending.transcript"):
            monkeypatch.setattr(f"{module}.canonical_json", counted_canonical)
        monkeypatch.setattr("toolref.sending.transcript.dumps_json", counted_dumps)
        monkeypatch.setattr("toolref.formats.scan", counted_scan)

    def reset(self) -> None:
        self.canonical = self.scanned = self.written = 0


def turn_of(manager: ToolReferenceManager, messages: Messages, head: str | None) -> httpx.Request:
    """A turn the backend answers by confirming `head` (computed beforehand: uncounted)."""
    exchange = manager.exchange(build, {"messages": messages})
    request = next(exchange)
    assert isinstance(request, httpx.Request)
    assert head is not None
    response = httpx.Response(200, json={}, headers={"Toolref-Protocol": "2", HISTORY_HEADER: head})
    with pytest.raises(StopIteration):
        exchange.send(response)
    return request


@pytest.mark.parametrize("kept", [64, 0])
def test_a_turn_works_on_its_new_messages_only(monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    manager = ToolReferenceManager(max_transcripts=kept)
    long = conversation(101)  # 405 messages, 101 invocations
    before, after = head_of(long[:-4], None), head_of(long, None)
    turn_of(manager, long[:-4], before)
    turn_of(manager, long[:-4], before)  # the server confirmed it: the next turn continues it
    counter = Counter(monkeypatch)
    request = turn_of(manager, long, after)
    assert request.headers[HISTORY_HEADER].startswith("th_")  # sends the 4 new messages
    if kept:
        # Each new message's chain form and the new invocation: not the 401 before them.
        assert counter.canonical <= 4 + 1
        assert counter.scanned == 4
        assert counter.written == 4
    else:
        assert counter.canonical > 400  # the same turn from scratch: the test can tell
        assert counter.scanned > 400


def test_a_result_arriving_a_turn_later_rescans_from_its_call_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = ToolReferenceManager()
    long = conversation(60)
    call_sent = long[:-2]  # ends with the assistant's tool call, its result not yet there
    turn_of(manager, call_sent, head_of(call_sent, None))
    after = head_of(long, None)
    counter = Counter(monkeypatch)
    turn_of(manager, long, after)
    # The two new messages; their result answers the call kept as waiting, so again from the
    # call's message, whose chain form changes.
    assert counter.scanned == 2 + 3
    assert counter.canonical == 3 + 1


def test_a_changed_message_is_seen_however_it_changed() -> None:
    long = conversation(5)
    keys = keys_of(long)
    held = transcribe(long, keys, None)
    store = Transcripts(4, 1 << 20)
    store.keep(held, None)
    long[8]["content"] = "edited in place"  # the same object: only its text tells
    found, common = store.find(None, keys_of(long))
    assert found is held
    assert common == 8
    assert held.common(keys_of(long)) == 8
    again = transcribe(long, keys_of(long), None, held)
    assert again == transcribe(long, keys_of(long), None)
    assert again.heads[:8] == held.heads[:8]
    assert again.heads[8] != held.heads[8]
    # A tool result edited in place changes its call's chain form too (the ref is of both).
    long[7]["content"] = "another result"
    assert transcribe(long, keys_of(long), None, again) == transcribe(long, keys_of(long), None)


def test_keys_fall_back_for_what_orjson_refuses() -> None:
    big = {"role": "user", "content": "x", "n": 2**70}
    assert key_of(big).startswith(b"\0")
    assert key_of({**big, "n": 2**70 + 1}) != key_of(big)
    assert key_of({1: "a"}) != key_of({"1": "a"})  # the stdlib writes both as {"1":"a"}
    assert key_of({"a": 1}) == b'{"a":1}'
    assert keys_of([{"a": 1}, big]) == (b'{"a":1}', key_of(big))


def test_the_dictionary_is_the_kept_texts_tail() -> None:
    long = conversation(40)
    long[3]["content"] = "é" * 700_000  # past the limit on its own, and not ASCII
    held = transcribe(long, keys_of(long), None)
    for length in (0, 1, 3, 4, 5, 60, len(long)):
        assert held.dictionary(length) == dictionary(long[:length])
    assert held.text_size == sum(
        len(json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode()) for m in long
    )


def test_transcripts_are_bounded_least_recently_used_first() -> None:
    store = Transcripts(2, 1 << 20)
    talks = [[{"role": "user", "content": f"conversation {n}"}] for n in range(3)]
    made = [transcribe(t, keys_of(t), None) for t in talks]
    for held in made:
        store.keep(held, None)
    assert len(store) == 2
    assert store.find(None, keys_of(talks[0])) == (None, 0)
    assert store.find(None, keys_of(talks[2])) == (made[2], 1)
    small = Transcripts(8, made[0].size + made[1].size)
    for held in made:
        small.keep(held, None)
    assert len(small) == 2
    assert small.size <= made[0].size + made[1].size
    assert Transcripts(8, 10).find(None, keys_of(talks[0])) == (None, 0)


def test_a_continuation_takes_the_place_of_what_it_continues_and_a_fork_does_not() -> None:
    store = Transcripts(8, 1 << 20)
    long = conversation(3)
    first = transcribe(long[:5], keys_of(long[:5]), None)
    store.keep(first, None)
    longer = transcribe(long, keys_of(long), None, first)
    store.keep(longer, first)
    assert len(store) == 1
    fork = [*long[:5], {"role": "user", "content": "another way"}]
    found, common = store.find(None, keys_of(fork))
    assert (found, common) == (longer, 5)
    forked = transcribe(fork, keys_of(fork), None, found, common)
    store.keep(forked, longer)
    assert len(store) == 2  # both branches stay
    assert store.find(None, keys_of(long)) == (longer, len(long))
    assert store.find(None, keys_of(fork)) == (forked, len(fork))


@pytest.mark.parametrize("result_id", [None, "fc-1"])
def test_a_result_answering_by_name_a_call_kept_as_waiting_is_seen(result_id: str | None) -> None:
    """Gemini pairs a result with the oldest waiting call of its tool name when ids are
    missing (the call's, or both): the call's message, kept, changes chain form."""
    call = {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"p": 1}}}]}
    response: dict[str, Any] = {"name": "read", "response": {"text": "x" * 50}}
    if result_id is not None:
        response["id"] = result_id
    talk: Messages = [{"role": "user", "parts": [{"text": "hi"}]}, call]
    held = transcribe(talk, keys_of(talk), None)
    assert held.pending == (transcript.Call(1, None, "read"),)
    talk += [{"role": "user", "parts": [{"functionResponse": response}]}]
    again = transcribe(talk, keys_of(talk), None, held)
    assert again == transcribe(talk, keys_of(talk), None)
    assert again.refs[1]  # the call is now a complete invocation
    assert not again.pending
