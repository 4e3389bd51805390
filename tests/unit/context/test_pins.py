"""The store decides the stand-in a result is sent as: what a gateway process holds of a
pin is a cache the pin overrides (`toolref_server.gateway.stand_ins`), read
in one call of the store on a turn that makes nothing. A store in memory stands for it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from toolref.asgi.workers import Workers
from toolref.kit import extractive
from toolref_server.context import facts as facts_module
from toolref_server.gateway import stand_ins as stand_ins_module
from toolref_server.gateway.context_edits import Outcome, edit_context
from toolref_server.metrics import Metrics
from toolref_server.registry.summary_cache import Summary
from toolref_server.settings.context import Policy

from .test_step import CHAT, conversation

# A batch of two results (each frees about 650 tokens) every second turn: turn 5 makes
# one, turn 6 none.
POLICY = Policy(mode="on", trigger_tokens=0, keep=1, clear_at_least=1_300, rewrite_weight=0.0)


class Store:
    """A summary store in memory (pins kept, first writer wins) that counts its calls and
    may refuse to keep anything (`full`: the tenant past its stored-bytes quota)."""

    ttl = 86_400  # seconds a pin lives unread

    def __init__(self) -> None:
        self.held: dict[Any, str] = {}
        self.calls: list[str] = []
        self.renewed: list[list[Any]] = []  # each read: the pins whose lifetimes it renewed
        self.full = False

    def invocation(self, tenant: str, ref: str, summarizer: str) -> tuple[str, str, str]:
        return (tenant, ref, summarizer)

    async def read(
        self, tenant: str, slots: Sequence[Any], renew: Sequence[Any] | None = None
    ) -> Sequence[Any]:
        self.calls.append("read")
        self.renewed.append(list(slots if renew is None else renew))
        return [self.held.get(slot) for slot in slots]

    async def pin(self, tenant: str, slots: Sequence[Any], texts: Sequence[str]) -> list[Any]:
        self.calls.append("pin")
        if self.full:
            return [None] * len(slots)
        return [self.held.setdefault(slot, text) for slot, text in zip(slots, texts, strict=True)]


class Summaries:
    """The summary cache, its summaries the extractive summarizer's, counted."""

    def __init__(self) -> None:
        self.store = Store()
        self.made = 0

    async def many(
        self, tenant: str, items: Sequence[tuple[Any, Mapping[str, Any]]], name: str, chars: int
    ) -> list[Summary]:
        self.made += len(items)
        return [
            Summary(extractive.summarize(invocation, chars), name, False, False)
            for _, invocation in items
        ]


@pytest.fixture(autouse=True)
def _turns_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each turn comes `READ_EVERY` after the one before (an agent's turns minutes apart):
    every turn reads the pins, as the tests below count."""
    now = [0.0]

    def clock() -> float:
        now[0] += stand_ins_module.READ_EVERY
        return now[0]

    monkeypatch.setattr(stand_ins_module, "clock", clock)


def body(turns: int) -> bytes:
    return json.dumps({"model": "m", "messages": conversation(turns)}).encode()


async def edited(sent: bytes, summaries: Summaries) -> tuple[bytes, Outcome]:
    out, outcome = await edit_context(
        sent,
        tenant="t",
        upstream="up",
        llm=CHAT,
        policy=POLICY,
        summaries=summaries,  # type: ignore[arg-type]
        workers=Workers(None, None),
        metrics=Metrics(),
    )
    assert outcome is not None
    return out, outcome


async def turns(summaries: Summaries) -> bytes:
    """Turn 5, its batch made: what it sent."""
    first, outcome = await edited(body(5), summaries)
    assert outcome.plan.rewrote
    assert outcome.plan.cleared
    return first


def goes_on(before: bytes, after: bytes) -> bool:
    return after.startswith(before.rstrip(b"}").rstrip(b"]"))


async def test_a_turn_that_makes_nothing_reads_the_pins_in_one_call_and_nothing_else() -> None:
    facts_module.forget()
    summaries = Summaries()
    first = await turns(summaries)
    summaries.store.calls.clear()
    made = summaries.made
    out, outcome = await edited(body(6), summaries)
    assert summaries.store.calls == ["read"]  # the pins read (and their lifetimes renewed)
    assert summaries.made == made
    assert out.count(b"[toolref:") == len(outcome.plan.cleared) == 4
    assert goes_on(first, out)
    assert not outcome.plan.rewrote


async def test_a_pin_another_replica_made_overrides_the_one_held_here() -> None:
    """The store lost this process's pins and another replica pinned other bytes (a model
    summarizing): this process sends the store's, and says the cache is written again."""
    facts_module.forget()
    summaries = Summaries()
    await turns(summaries)
    theirs = {slot: json.dumps("[theirs]") for slot in summaries.store.held}
    summaries.store.held = dict(theirs)
    out, outcome = await edited(body(6), summaries)
    assert out.count(b"[theirs]") == len(outcome.plan.cleared) == 4
    assert b"[toolref:" not in out
    assert outcome.plan.rewrote


async def test_a_pin_lost_is_pinned_again_as_held_here() -> None:
    """After a flush, the first process to send a result's stand-in pins it again: one that
    held it, in the same bytes (the provider's cache holds; no rewrite is said)."""
    facts_module.forget()
    summaries = Summaries()
    first = await turns(summaries)
    before = dict(summaries.store.held)
    summaries.store.held.clear()
    made = summaries.made
    out, outcome = await edited(body(6), summaries)
    assert goes_on(first, out)
    assert summaries.store.held == before
    assert summaries.made == made  # nothing summarized again
    assert not outcome.plan.rewrote


async def test_a_pin_lost_that_the_store_cannot_keep_again_is_not_sent() -> None:
    """The store lost the pins and refuses to keep them again (the tenant past its
    stored-bytes quota): another replica could not find them, so this one no longer sends
    them either: the results go as they came, and the cache written again is said."""
    facts_module.forget()
    summaries = Summaries()
    await turns(summaries)
    summaries.store.held.clear()
    summaries.store.full = True
    out, outcome = await edited(body(6), summaries)
    assert out == body(6)
    assert outcome.plan.cleared == ()
    assert outcome.plan.rewrote


async def test_a_process_that_held_nothing_sends_the_pins_and_says_no_rewrite() -> None:
    """A replica new to a conversation reads the stand-ins another pinned and sent: the
    same bytes as the turn before, so no rewrite is said, and nothing is summarized."""
    facts_module.forget()
    summaries = Summaries()
    first = await turns(summaries)
    facts_module.forget()  # another replica: nothing of the conversation held
    made = summaries.made
    summaries.store.calls.clear()
    out, outcome = await edited(body(6), summaries)
    assert goes_on(first, out)
    assert summaries.store.calls == ["read"]
    assert summaries.made == made
    assert not outcome.plan.rewrote


async def test_a_held_pin_is_renewed_once_a_quarter_of_its_lifetime_went_by(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pin's EXPIRE is a command a pin: a turn renews only the pins this process last
    renewed a quarter of the store's TTL ago or more, so a late turn of a long conversation
    costs one read, not a command per result replaced (gateway CPU growing each turn)."""
    facts_module.forget()
    now = [1_000.0]
    monkeypatch.setattr(stand_ins_module, "clock", lambda: now[0])
    summaries = Summaries()
    await turns(summaries)  # made and pinned: their lifetimes are whole
    summaries.store.renewed.clear()
    now[0] += stand_ins_module.READ_EVERY
    await edited(body(6), summaries)
    assert summaries.store.renewed == [[]]  # read, none renewed
    now[0] += stand_ins_module.RENEWED * Store.ttl
    await edited(body(6), summaries)
    [renewed] = summaries.store.renewed[1:]
    assert len(renewed) == 4  # every pin held, renewed
    now[0] += stand_ins_module.READ_EVERY
    await edited(body(6), summaries)
    assert summaries.store.renewed[2:] == [[]]  # and not again until another quarter


async def test_turns_back_to_back_read_the_pins_held_once_a_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn whose stand-ins are all held here, their pins read less than `READ_EVERY`
    ago, asks the store nothing (turns back to back: a subagent's, a replay); the first
    turn after the window reads them again."""
    facts_module.forget()
    now = [1_000.0]
    monkeypatch.setattr(stand_ins_module, "clock", lambda: now[0])
    summaries = Summaries()
    first = await turns(summaries)
    summaries.store.calls.clear()
    out, outcome = await edited(body(6), summaries)
    assert summaries.store.calls == []
    assert out.count(b"[toolref:") == len(outcome.plan.cleared) == 4
    assert goes_on(first, out)
    now[0] += stand_ins_module.READ_EVERY
    await edited(body(6), summaries)
    assert summaries.store.calls == ["read"]
