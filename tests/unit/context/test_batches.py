"""Context editing's plan (`toolref_server.context.batches`): which results a request has
replaced, replayed from the conversation alone.

Properties over arbitrary conversations (message sizes, the model's turns, results of any
size and tool): what one turn replaced stays replaced on every later turn; the last `keep`
results, small ones and excluded tools are never replaced; a batch frees at least
`clear_at_least`; nothing is replaced below the trigger, nor in the request that first
brings it to the model; `rewrote` says exactly when a
turn replaced more than the one before; and a batch that would not pay for itself (the
cache it rewrites against the reads it saves) is not made.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from toolref.formats import Site
from toolref_server.context.batches import BYTES_PER_TOKEN, Plan, plan
from toolref_server.context.facts import Call, Message, Result
from toolref_server.settings.context import Policy

TOOLS = ("read", "bash", "grep")


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """A user message, then turns: the model's message (calls, 1-3 of them), the results."""
    messages = [Message("", 0, 0, draw(st.integers(10, 2000)), model=False)]
    for turn in range(draw(st.integers(1, 40))):
        calls = []
        index = len(messages)
        for n in range(draw(st.integers(0, 3))):
            call_id = f"c{turn}-{n}"
            calls.append(Call(call_id, draw(st.sampled_from(TOOLS)), index, Site((0,), call_id)))
        messages.append(Message("", 0, 0, draw(st.integers(10, 3000)), True, tuple(calls)))
        for call in calls:
            size = draw(st.integers(10, 40_000))
            result = Result(
                Site((0,), call.call_id, result_key="content"), call.call_id, None, size, False
            )
            messages.append(Message("", 0, 0, size + 40, False, (), (result,)))
    return messages


POLICIES = st.builds(
    Policy,
    mode=st.just("on"),
    trigger_tokens=st.integers(0, 60_000),
    keep=st.integers(0, 6),
    min_tokens=st.integers(0, 2_000),
    clear_at_least=st.integers(0, 20_000),  # 0: the config file may say so
    exclude_tools=st.sets(st.sampled_from(TOOLS), max_size=1).map(frozenset),
    summary_chars=st.integers(40, 800),
    rewrite_weight=st.sampled_from([0.0, 1.0, 11.5]),
)


def turns(messages: list[Message]) -> list[int]:
    """How many messages each turn's request held: up to each run of the model's, and all."""
    ends = [i for i, m in enumerate(messages) if m.model and i and not messages[i - 1].model]
    return [*ends, len(messages)]


def keys(found: Plan) -> set[tuple[int, int]]:
    return {(c.message, c.result) for c in found.cleared}


@settings(max_examples=300, deadline=None)
@given(conversations(), POLICIES)
def test_a_result_replaced_stays_replaced_and_the_policy_holds(
    messages: list[Message], policy: Policy
) -> None:
    before: set[tuple[int, int]] = set()
    batches = 0
    for end in turns(messages):
        found = plan(messages[:end], policy)
        now = keys(found)
        assert before <= now, "a later turn put back a result an earlier one replaced"
        assert found.rewrote == (now != before)
        assert found.batches == batches + found.rewrote
        if found.rewrote:
            new = [c for c in found.cleared if (c.message, c.result) not in before]
            assert sum(c.freed for c in new) >= policy.clear_at_least * BYTES_PER_TOKEN
        results = [(i, r) for i, m in enumerate(messages[:end]) for r, _ in enumerate(m.results)]
        kept = set(results[len(results) - policy.keep :]) if policy.keep else set()
        assert not now & kept, "one of the last `keep` results was replaced"
        last_model = max((i for i, m in enumerate(messages[:end]) if m.model), default=-1)
        assert all(c.message < last_model for c in found.cleared), "replaced ere it was read"
        for cleared in found.cleared:
            result = messages[cleared.message].results[cleared.result]
            assert result.size >= policy.min_tokens * BYTES_PER_TOKEN
            assert cleared.name not in policy.exclude_tools
        if found.size <= policy.trigger_tokens * BYTES_PER_TOKEN:
            assert not found.cleared, "results replaced below the trigger"
        before, batches = now, found.batches


def reads(count: int, asked: int, result: int) -> list[Message]:
    """A user's message, then `count` turns: the model's message of `asked` bytes calling
    `read`, and its result of `result` bytes."""
    messages = [Message("", 0, 0, 100, False)]
    for n in range(count):
        call = Call(f"c{n}", "read", len(messages), Site((0,), f"c{n}"))
        found = Result(Site((0,), f"c{n}", result_key="content"), f"c{n}", "read", result, False)
        messages += [
            Message("", 0, 0, asked, True, (call,)),
            Message("", 0, 0, result + 40, False, (), (found,)),
        ]
    return messages


def test_results_the_model_has_not_read_are_never_replaced() -> None:
    """The model calls `read` eight times at once, past the trigger: none of the eight
    results is replaced in the request that brings them (the model never read them),
    whatever `keep` says; on the next request, after the model's answer, the older ones
    are due."""
    messages = [Message("", 0, 0, 100, False)]
    calls = [Call(f"c{n}", "read", 1, Site((0,), f"c{n}")) for n in range(8)]
    messages.append(Message("", 0, 0, 400, True, tuple(calls)))
    for n in range(8):
        found = Result(Site((0,), f"c{n}", result_key="content"), f"c{n}", "read", 9_000, False)
        messages.append(Message("", 0, 0, 9_040, False, (), (found,)))
    policy = Policy(mode="on", trigger_tokens=1_000, keep=3, clear_at_least=1, rewrite_weight=0.0)
    assert plan(messages, policy).cleared == ()
    messages += [Message("", 0, 0, 300, True), Message("", 0, 0, 50, False)]
    assert [c.message for c in plan(messages, policy).cleared] == [2, 3, 4, 5, 6]


def test_a_batch_that_would_not_pay_for_itself_is_not_made() -> None:
    """The same conversation: with the cache's cost weighed (11.5 for Anthropic's prices) a
    batch early in a long conversation waits until enough turns came to repay it, while
    with no weight it is made as soon as it is due."""
    messages = reads(60, 4_000, 30_000)
    free = Policy(mode="on", trigger_tokens=10_000, keep=1, rewrite_weight=0.0)
    weighed = replace(free, rewrite_weight=11.5)
    first: dict[float, int | None] = {policy.rewrite_weight: None for policy in (free, weighed)}
    for end in turns(messages):
        for policy in (free, weighed):
            if first[policy.rewrite_weight] is None and plan(messages[:end], policy).cleared:
                first[policy.rewrite_weight] = end
    assert first[0.0] is not None
    assert first[11.5] is not None
    assert first[0.0] < first[11.5]


def test_nothing_is_replaced_below_the_trigger_and_all_due_at_once_above() -> None:
    messages = reads(6, 200, 8_000)
    policy = Policy(mode="on", trigger_tokens=100_000, keep=2, rewrite_weight=0.0)
    assert plan(messages, policy).cleared == ()
    # 12,385 tokens in all; 10,325 at the turn before: only this one passes 11,000
    found = plan(messages, replace(policy, trigger_tokens=11_000, clear_at_least=1))
    assert [c.message for c in found.cleared] == [2, 4, 6, 8]  # all but the last 2, at once
    assert found.batches == 1
    assert found.rewrote
