"""The gateway's context editing step never fails a request: a body it cannot read, or
whose summaries cannot be had (the store down), passes as it came; a body that goes on from
a remembered one is read as from scratch, invalid or odd tails included."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from tests.support.threads import threads_of
from toolref.asgi.workers import Workers
from toolref.kit.quieted import Quieted
from toolref.wire.endpoints import Endpoint
from toolref.wire.errors import StoreUnavailableError
from toolref_server.context import facts as facts_module
from toolref_server.context.facts import facts_of
from toolref_server.gateway import context_edits
from toolref_server.gateway.context_edits import edit_context
from toolref_server.metrics import Metrics
from toolref_server.settings.context import Policy

CHAT = Endpoint("openai-chat", "messages")
POLICY = Policy(mode="on", trigger_tokens=0, keep=1, clear_at_least=1, rewrite_weight=0.0)


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "r", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{t}", "content": "x" * 3000},
        ]
    return messages


class DownStore:
    """The summary store with its engine down (a fault injected: every read raises)."""

    def invocation(self, tenant: str, ref: str, summarizer: str) -> tuple[str, str, str]:
        return (tenant, ref, summarizer)

    ttl = 86_400  # seconds a pin lives unread

    async def read(self, *args: Any) -> Sequence[Any]:
        raise StoreUnavailableError("the store is down")


class Down:
    """The summary cache with its store down."""

    store = DownStore()

    async def many(self, *args: Any) -> Sequence[Any]:
        raise StoreUnavailableError("the store is down")


async def edited(body: bytes, summaries: Any, workers: Workers | None = None) -> tuple[bytes, Any]:
    return await edit_context(
        body,
        tenant="t",
        upstream="up",
        llm=CHAT,
        policy=POLICY,
        summaries=summaries,
        workers=workers or Workers(None, None),
        metrics=Metrics(),
    )


async def test_summaries_that_cannot_be_had_leave_the_body_as_it_came() -> None:
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    out, outcome = await edited(body, Down())
    assert out == body
    assert outcome is not None
    assert outcome.plan.cleared == ()
    assert not outcome.plan.rewrote


class PinnedStore:
    """A summary store holding a pinned stand-in for every result asked for."""

    def invocation(self, tenant: str, ref: str, summarizer: str) -> tuple[str, str, str]:
        return (tenant, ref, summarizer)

    ttl = 86_400  # seconds a pin lives unread

    async def read(
        self, tenant: str, slots: Sequence[Any], renew: Sequence[Any] | None = None
    ) -> Sequence[Any]:
        return ['"[stand-in]"' for _ in slots]


class Pinned:
    store = PinnedStore()


async def test_a_store_down_holds_the_new_batch_back_and_keeps_the_ones_before() -> None:
    """Turn 1 replaces three results; on turn 2 the store is down as a new batch falls due:
    the three stay replaced, in the same bytes (the provider's cache holds), and the new
    ones wait, sent as they came; no rewrite is said."""
    facts_module.forget()
    first = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    out1, outcome1 = await edited(first, Pinned())
    assert outcome1 is not None
    assert len(outcome1.plan.cleared) == 3
    assert out1.count(b"[stand-in]") == 3
    second = json.dumps({"model": "m", "messages": conversation(6)}).encode()
    out2, outcome2 = await edited(second, Down())
    assert outcome2 is not None
    assert out2.count(b"[stand-in]") == 3
    assert out2.startswith(out1[: out1.rindex(b"[stand-in]")])  # the same bytes before
    assert not outcome2.plan.rewrote


class LongerStore(PinnedStore):
    """A summary store whose pinned stand-ins are longer than the results they stand for
    (a summary of non-ASCII text, or a long call shown, beyond the plan's estimate)."""

    ttl = 86_400  # seconds a pin lives unread

    async def read(
        self, tenant: str, slots: Sequence[Any], renew: Sequence[Any] | None = None
    ) -> Sequence[Any]:
        return [json.dumps("[stand-in] " + "y" * 3100) for _ in slots]


class Longer:
    store = LongerStore()


async def test_a_stand_in_no_shorter_than_its_result_leaves_the_result_as_it_came() -> None:
    """A result is replaced only by fewer bytes: a stand-in longer than the result would
    send the provider more than the client did (and write its cache again for nothing)."""
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    out, outcome = await edited(body, Longer())
    assert out == body
    assert outcome is not None
    assert outcome.plan.cleared == ()
    assert outcome.saved == 0


async def test_a_batch_none_of_whose_results_is_replaced_says_no_rewrite() -> None:
    """Found in review: when no result of the turn's batch could be replaced (each stand-in
    longer than its result, or not kept by the store), the answer still said `rewrote=1`
    and `/metrics` counted a rewrite, though the body went as it came."""
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    metrics = Metrics()
    out, outcome = await edit_context(
        body,
        tenant="t",
        upstream="up",
        llm=CHAT,
        policy=POLICY,
        summaries=Longer(),  # type: ignore[arg-type]
        workers=Workers(None, None),
        metrics=metrics,
    )
    assert out == body
    assert outcome is not None
    assert not outcome.plan.rewrote
    assert b"rewrote=0" in outcome.header()[1]
    counted = metrics.registry.get_sample_value(
        "toolref_context_requests_total", {"outcome": "rewrote"}
    )
    assert not counted


async def test_a_message_nested_deeper_than_a_parse_goes_passes_as_it_came() -> None:
    facts_module.forget()
    deep = "[" * 100_000 + "]" * 100_000
    body = (
        '{"model":"m","messages":[{"role":"user","content":"go"},'
        '{"role":"tool","tool_call_id":"c","content":' + deep + "}]}"
    ).encode()
    out, outcome = await edited(body, Down())
    assert out == body
    assert outcome is None


@pytest.mark.parametrize(
    "tail",
    [
        ', "messages": [{"role": "user", "content": "again"}]}',  # a parser keeps the last list
        ', "stream": tru}',  # not JSON
        "} trailing",
        ', "x": 1',  # never closed
    ],
)
def test_a_body_going_on_from_a_remembered_one_is_read_as_from_scratch(tail: str) -> None:
    """What follows the messages is checked on the remembered path as the scan from scratch
    checks it: a second messages list, invalid JSON or extra data is not read."""
    messages = conversation(2)
    facts_module.forget()
    first = json.dumps({"model": "m", "messages": messages[:3]})
    assert facts_of(first.encode(), "t", "openai-chat", "messages") is not None
    grown = json.dumps({"model": "m", "messages": messages})[:-1] + tail
    remembered = facts_of(grown.encode(), "t", "openai-chat", "messages")
    facts_module.forget()
    fresh = facts_of(grown.encode(), "t", "openai-chat", "messages")
    assert remembered is None
    assert fresh is None


def test_text_that_looks_like_an_observation_in_a_conversation_with_tools_is_a_person_s() -> None:
    messages = [
        *conversation(1),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "Observation: the login broke after that " + "y" * 900},
    ]
    facts_module.forget()
    found = facts_of(json.dumps({"messages": messages}).encode(), "t", "openai-chat", "messages")
    assert found is not None
    assert not found.messages[-1].results
    assert len(found.messages[2].results) == 1  # the tool's own result


def test_a_body_after_one_with_two_messages_lists_is_read_for_itself() -> None:
    """The scan resumed from a body that had a second messages list counts the lists of
    the body it reads, not those of the one before."""
    messages = conversation(2)
    facts_module.forget()
    two = json.dumps({"model": "m", "messages": messages})[:-1] + ', "messages": []}'
    assert facts_of(two.encode(), "t", "openai-chat", "messages") is None
    one = json.dumps({"model": "m", "messages": [*messages, {"role": "user", "content": "n"}]})
    assert facts_of(one.encode(), "t", "openai-chat", "messages") is not None


def test_more_messages_than_the_bound_are_not_read_before_any_is_parsed() -> None:
    """TOOLREF_CONTEXT_MAX_MESSAGES: a request of more messages passes as it came, on the
    path from scratch and on the one from a remembered body alike."""
    messages = conversation(5)  # 11 messages
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert facts_of(body, "t", "openai-chat", "messages", max_messages=10) is None
    assert facts_of(body, "t", "openai-chat", "messages", max_messages=11) is not None
    grown = json.dumps({"model": "m", "messages": [*messages, *conversation(1)[1:]]}).encode()
    assert facts_of(grown, "t", "openai-chat", "messages", max_messages=12) is None
    assert facts_of(grown, "t", "openai-chat", "messages", max_messages=13) is not None


@pytest.mark.parametrize("where", ["plan", "rewritten"])
async def test_a_fault_of_the_step_sends_the_request_as_it_came(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the plan or the rewrite (a fault injected) is logged, not the client's
    failure: the body goes on as it came."""
    from toolref_server.gateway import context_edits

    def broken(*args: Any) -> Any:
        raise IndexError("a fault injected")

    monkeypatch.setattr(context_edits, where, broken)
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    out, outcome = await edited(body, Down())
    assert out == body
    assert outcome is None


@pytest.mark.parametrize("format_name", ["anthropic", "openai-chat"])
def test_a_message_holding_a_result_is_counted_whole(format_name: str) -> None:
    """A message's size is its own bytes (less marks and ids), not its last result's: the
    plan's trigger counts the turns by it (the message's size was its last result's, so a
    result beside 5 KB of text counted 1 KB, and a cache mark in that result's content,
    moving on at the next turn, changed what every earlier turn was counted at)."""
    if format_name == "anthropic":
        last: dict[str, Any] = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "x" * 1000},
                {"type": "text", "text": "y" * 5000},
            ],
        }
        call: dict[str, Any] = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {"p": "x"}}],
        }
    else:
        last = {"role": "tool", "tool_call_id": "a", "content": "x" * 1000, "note": "y" * 5000}
        call = {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
            ],
        }
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}, call, last]})
    facts_module.forget()
    found = facts_of(body.encode(), "t", format_name, "messages")
    assert found is not None
    message = found.messages[-1]
    assert [r.size for r in message.results] == [1002]
    assert message.size > 6000


def test_a_body_of_more_arrays_and_objects_than_the_bound_is_not_read() -> None:
    """TOOLREF_MAX_CONTAINERS: a body whose messages' parse would hold more arrays and
    objects passes unread, on the path from scratch and on the one from a remembered body
    alike; brackets within strings (escaped quotes and all) are not counted."""
    messages = conversation(2)  # 13 arrays and objects, and `{}` twice in strings
    facts_module.forget()
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert facts_of(body, "t", "openai-chat", "messages", max_containers=12) is None
    assert facts_of(body, "t", "openai-chat", "messages", max_containers=13) is not None
    grown = json.dumps({"model": "m", "messages": [*messages, {"role": "user", "content": []}]})
    assert facts_of(grown.encode(), "t", "openai-chat", "messages", max_containers=14) is None
    assert facts_of(grown.encode(), "t", "openai-chat", "messages", max_containers=15)
    quoted = [*messages, {"role": "user", "content": '\\"[{' * 50 + '"[{\\'}]
    text = json.dumps({"model": "m", "messages": quoted}).encode()
    assert facts_of(text, "t", "openai-chat", "messages", max_containers=14) is not None


@pytest.mark.parametrize(
    ("text", "count"),
    [
        (b'{"a": [1, {"b": "[{"}]}', 3),
        (b'["\\\\", [], "\\"[", {}]', 3),  # an escaped backslash ends before the quote
        (b"[" + b'"\\"' * 1000, 1),  # a string never closed: its brackets are not counted
        (b'[["' + b"\\" * 999, 2),  # nor after a last lone backslash
    ],
)
def test_the_arrays_and_objects_counted_are_those_outside_strings(text: bytes, count: int) -> None:
    assert facts_module.containers(text, 0) == count


async def test_a_store_down_is_warned_once_an_interval_not_per_request(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request that carries stand-ins while the store is down fails its read; one
    warning says so, not one a request (before: a line a request, thousands a second
    under load)."""
    # a process of its own: no warning said by a test before
    monkeypatch.setattr(context_edits, "quiet", Quieted(context_edits.log), raising=False)
    facts_module.forget()
    first = json.dumps({"model": "m", "messages": conversation(4)}).encode()
    await edited(first, Pinned())
    second = json.dumps({"model": "m", "messages": conversation(6)}).encode()
    with caplog.at_level(logging.WARNING, logger="toolref_server.gateway.context_edits"):
        for _ in range(20):
            out, _outcome = await edited(second, Down())
            assert out.count(b"[stand-in]") == 3
    said = [r for r in caplog.records if "held here are sent" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]


@pytest.mark.parametrize("count", [3, 1000])
async def test_a_body_of_many_small_messages_is_read_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """Found in review: the step went to a worker thread by the body's bytes alone, and
    reads a message at a time in Python (60-110 us each): 16,000 tiny messages, 520 KB,
    under the 512 KiB threshold, held the event loop for a second. A body is weighed with
    its objects and arrays (`workers.weight`): a few messages stay inline, a thousand
    (32 KB) go to a thread."""
    threads = threads_of(monkeypatch, context_edits, "_read")
    facts_module.forget()
    messages = [{"role": "user", "content": f"m{n}"} for n in range(count)]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    assert len(body) < 64 << 10  # far under the threshold by its bytes
    workers = Workers(1, 512 << 10)
    try:
        await edited(body, Down(), workers)
    finally:
        workers.close()
    expected = "toolref-work" if count > 100 else threading.main_thread().name
    assert [t.split("_")[0] for t in threads] == [expected]
