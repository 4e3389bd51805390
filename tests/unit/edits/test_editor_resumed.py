"""A turn cut on from the body before (`toolref.edits.bodycut`), sent against that body's
recipe (`Editor._resumed`), diffed over the segments both hold in one step and kept on its
base's bookkeeping, is the edit the pass over the whole request makes, byte for byte,
whatever the conversation did (steps, edits, deletions and insertions in the middle,
compaction, regenerate), and conversations interleaved keep their own lines."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.agents import HEADERS, STYLES, Agent
from tests.unit.edits.oracle import Registry, deliver, send
from tests.unit.edits.test_editor import ACTIONS, act
from toolref.edits import bodycut
from toolref.edits.recipe import is_piece, piece_of
from toolref.sending.editor import RESUMED_SHARE, Edit, Editor
from toolref.sending.recipes import ENTRY_COST


def forget() -> None:
    bodycut.forget()


@given(
    st.sampled_from(STYLES),
    st.sampled_from([0, 1, 2, 5]),
    st.booleans(),
    st.booleans(),
    st.lists(ACTIONS, min_size=1, max_size=25),
    st.integers(0, 10**6),
)
@settings(max_examples=60, deadline=None)
def test_a_resumed_turn_is_the_edit_of_the_whole_pass(
    style: str, marks: int, text_results: bool, guard: bool, actions: list[str], seed: int
) -> None:
    agent = Agent(seed, style, marks, text_results)
    resumed, whole = Editor(size_guard=guard), Editor(size_guard=guard)
    registries = Registry(), Registry()
    forget()
    for action in ["step", "step", *actions]:
        act(agent, action)
        both((resumed, whole), registries, agent.body())


def both(
    editors: tuple[Editor, Editor], registries: tuple[Registry, Registry], body: bytes
) -> Edit:
    """`body` through the resumed editor (cut on from the body before) and the whole pass's
    (from scratch): one edit, byte for byte (`Editor._resumed` takes the body before's
    recipe only where no other recipe can share more), each restored by its registry; the
    resumed one."""
    fast = editors[0].prepare(HEADERS, body, "messages")
    forget()
    slow = editors[1].prepare(HEADERS, body, "messages")
    assert fast is not None
    assert slow is not None
    assert slow.cut.same == 0
    assert (fast.ref, fast.base, fast.body, fast.kept) == (
        slow.ref,
        slow.base,
        slow.body,
        slow.kept,
    )
    for editor, registry, edit in zip(editors, registries, (fast, slow), strict=True):
        assert deliver(editor, registry, edit).answer.body == body  # confirmed as it was made
    assert list(editors[0].recipes) == list(editors[1].recipes)  # the same bases dropped
    return fast


@pytest.mark.parametrize("guard", [False, True])
def test_an_older_recipe_sharing_more_is_the_base_of_a_resumed_turn(guard: bool) -> None:
    """Four deletions leave a turn sharing no message with the recipe before it (no base:
    a line of its own), an insertion and a step follow; the step's body, cut on from the
    insertion's, shares a little more with the older recipe (it holds the message the moved
    cache mark left as it is now). Before, the resumed editor sent it against the body
    before's recipe (344 of 20,144 bytes less shared); that recipe lacks an entry the older
    one holds (`Recipes.rivalled`), so the pass chooses, and both editors send one edit."""
    agent = Agent(0, "compact", 1, text_results=False)
    resumed, whole = Editor(size_guard=guard), Editor(size_guard=guard)
    registries = Registry(), Registry()
    forget()
    actions = ["compact", "step", "delete", "delete", "delete", "delete", "insert", "step"]
    for action in ["step", "step", *actions]:
        act(agent, action)
        fast = both((resumed, whole), registries, agent.body())
    assert fast.cut.resumed is not None
    assert fast.base != fast.cut.resumed  # the case this test holds


def _chat(*messages: dict[str, str]) -> bytes:
    return json.dumps({"model": "m", "messages": list(messages)}).encode()


@pytest.mark.parametrize("again", [False, True], ids=["branch-taken-again", "retried"])
def test_a_turn_back_on_an_earlier_branch_is_sent_against_that_branch(again: bool) -> None:
    """[A, B, C], then C edited to D, then back on C's branch ([A, B, C, E]) or C's request
    again (a retry): the body before is D's, which the turn is cut on from, and its recipe
    shares A and B; C's recipe shares C too. Found in review: the resumed path sent the turn
    against D's recipe (170 bytes where the pass sends 94; 102 where a retry is 21), and the
    JS SDK, with no resumed path, sent the pass's bytes. Now the two are one edit."""
    a = {"role": "user", "content": "read this file:\n" + "def f(x):\n    return x + 1\n" * 150}
    b = {"role": "assistant", "content": "I read it. " * 10}
    c = {"role": "user", "content": "now explain the function in detail please " * 6}
    d = {"role": "user", "content": "no, rewrite the function in rust instead " * 6}
    e = {"role": "assistant", "content": "Sure, here it is." * 3}
    turns = [_chat(a, b, c), _chat(a, b, d), _chat(a, b, c) if again else _chat(a, b, c, e)]
    resumed, whole = Editor(), Editor()
    registries = Registry(), Registry()
    forget()
    first, second, third = [both((resumed, whole), registries, body) for body in turns]
    assert third.cut.resumed == second.ref  # cut on from the body before
    assert third.base == first.ref  # sent against the branch it goes back to
    assert len(third.body) < len(second.body)


def test_a_conversation_repeating_itself_drops_the_same_bases_either_way() -> None:
    """A message said again and again (a user pasting the same text each turn): the bytes
    at the same places count it each time, the pass over the request once per distinct
    entry. Both now weigh what the edit kept of its base (`Edit.kept`), so the fast path
    drops the base exactly where the pass does (before: the fast path dropped it, the
    pass kept it, and the next turns went against different bases)."""
    said = "please run the whole test suite again and tell me what failed " * 8
    messages: list[dict[str, object]] = []
    resumed, whole = Editor(), Editor()
    registries = Registry(), Registry()
    forget()
    for turn in range(12):
        messages += [{"role": "user", "content": said}]
        body = json.dumps({"model": "m", "max_tokens": 9, "messages": messages}).encode()
        sizes = {
            ref: recipe.size for ref in resumed.recipes if (recipe := resumed.recipes.get(ref))
        }
        edit = both((resumed, whole), registries, body)
        if turn >= 1:  # the base kept, each entry once (its closing glue aside): not more
            assert edit.base is not None
            assert sizes[edit.base] - 8 <= edit.kept <= sizes[edit.base]
        if turn >= 5:  # the fast path: what the body before's recipe holds is most of it
            assert edit.cut.same_bytes >= RESUMED_SHARE * edit.cut.size
            assert edit.base == edit.cut.resumed
        messages += [{"role": "assistant", "content": f"ran it, {turn} failed"}]
    assert len(resumed.recipes) == 1  # each turn continued its base: dropped


def test_a_growing_conversation_takes_the_resumed_path_every_turn() -> None:
    agent = Agent(7, "compact", 2, text_results=True)
    editor, registry = Editor(), Registry()
    forget()
    for turn in range(40):
        agent.step()
        body = agent.body()
        edit = editor.prepare(HEADERS, body, "messages")
        assert edit is not None
        if turn >= 2:  # the body before was cut here, and its recipe confirmed
            assert edit.cut.same > 0
            assert edit.base == edit.cut.resumed
        assert send(editor, registry, HEADERS, body).answer.body == body
    assert len(editor.recipes) == 1  # each turn's base dropped once it is kept
    [ref] = editor.recipes
    recipe = editor.recipes.get(ref)
    assert recipe is not None  # its cost, counted on its base's, is the one counted whole
    assert recipe.cost == sum(map(len, recipe.entries)) + ENTRY_COST * len(recipe.entries)
    pieces = {piece_of(entry) for entry in recipe.entries if is_piece(entry)}
    held = sum(len(editor.recipes.piece(piece)) for piece in pieces)
    assert editor.recipes.held_bytes == recipe.cost + held  # the tools' piece, once


def test_interleaved_conversations_each_go_on_from_their_own_body() -> None:
    rng = random.Random(5)
    agents = [Agent(seed, STYLES[seed % 4], marks=seed % 3) for seed in range(4)]
    editor, registry = Editor(), Registry()
    refs: list[set[str]] = [set() for _ in agents]
    forget()
    own = 0
    for _ in range(80):
        which = rng.randrange(len(agents))
        agents[which].step()
        body = agents[which].body()
        edit = editor.prepare(HEADERS, body, "messages")
        assert edit is not None
        assert edit.base is None or edit.base in refs[which]  # never another's
        if edit.cut.resumed in refs[which]:  # cut on from its own body before
            own += 1
            assert edit.base == edit.cut.resumed
        assert send(editor, registry, HEADERS, body).answer.body == body
        refs[which].add(edit.ref)
    assert own >= 80 - 3 * len(agents)  # all but the first turns (a cut of another's envelope)


def _read(task: str, results: list[tuple[str, str]], system: str) -> bytes:
    """A conversation of `task` whose tool calls (`id`, `text` read) were answered, its
    system prompt after its messages (as Claude Code writes a body)."""
    messages: list[dict[str, object]] = [{"role": "user", "content": task}]
    for call, text in results:
        use = {"type": "tool_use", "id": call, "name": "read", "input": {"path": "a.py"}}
        done = {"type": "tool_result", "tool_use_id": call, "content": text}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [done]}]
    body = {"model": "m", "max_tokens": 10, "messages": messages, "system": system}
    return json.dumps(body).encode()


def test_an_entry_only_an_unrelated_conversation_holds_leaves_the_turn_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two conversations (subagents of one agent) whose system prompt changes (a new
    date, a new status line) after their messages: the second's turn brings the prompt the
    first already sent, which the first's line holds, and no message of the turn relates
    the two, so the pass would choose the body before's recipe all the same. Found in
    review: `Recipes.rivalled` counted any line holding an added entry, and sent such a turn
    through the pass over the whole request (its CPU, none of its bytes); now only lines the
    pass would weigh (holding one of the request's messages) rival the base."""
    old = "You are a coding agent. Today is day 1 of the job; follow the rules.\n" * 40
    new = old.replace("day 1", "day 2")
    mine = [(f"toolu_b{n}", f"prior {n} " * 900) for n in range(3)]
    theirs = [(f"toolu_a{n}", f"other {n} " * 900) for n in range(2)]
    a = "Task alpha: fix the parser's failing test, and say what was wrong with it."
    b = "Task beta: document the cache module, its settings and its failure modes."
    step = ("toolu_b4", "more " * 100)
    turns = [
        _read(a, theirs, old),
        _read(a, [*theirs, ("toolu_a4", "less " * 100)], new),
        _read(b, mine, old),
        _read(b, [*mine, step], new),
    ]
    resumed, whole = Editor(), Editor()
    registries = Registry(), Registry()
    forget()
    edits = [both((resumed, whole), registries, body) for body in turns[:-1]]
    passes: list[int] = []
    inner = resumed.recipes.best_base

    def counted(*args: Any) -> Any:
        passes.append(1)
        return inner(*args)

    monkeypatch.setattr(resumed.recipes, "best_base", counted)
    fast = resumed.prepare(HEADERS, turns[-1], "messages")
    assert passes == []  # no pass over the request to find its base
    monkeypatch.undo()
    forget()
    slow = whole.prepare(HEADERS, turns[-1], "messages")
    assert fast is not None
    assert slow is not None
    assert (fast.ref, fast.base, fast.body) == (slow.ref, slow.base, slow.body)
    assert fast.cut.resumed == edits[-1].ref
    assert fast.base == fast.cut.resumed  # the body before's recipe, as the pass chose
    for editor, registry in zip((resumed, whole), registries, strict=True):
        assert send(editor, registry, HEADERS, turns[-1]).answer.body == turns[-1]


def test_a_request_repeating_the_base_s_last_message_keeps_its_bytes_once() -> None:
    """Another conversation saying the base's last message again and again (a status line
    pasted each turn) keeps those bytes of the base once: it continues no conversation, the
    base stays, and the base's own next turn goes against it. Counted on the request's side,
    the repeats made the other request "keep" more than half the base, which was dropped
    and its next turn sent its long answer again (a review's case)."""
    task = {"role": "user", "content": "task: summarise the failing tests in this repo " * 4}
    answer = "".join(f"line {i} of a long distinct answer\n" for i in range(900))
    long = {"role": "assistant", "content": answer}
    last = {"role": "user", "content": "status: 3 failed, 41 passed, see the log for it " * 10}
    editor, registry = Editor(), Registry()

    def body(messages: list[dict[str, str]]) -> bytes:
        return json.dumps({"model": "m", "max_tokens": 9, "messages": messages}).encode()

    forget()
    send(editor, registry, HEADERS, body([task, long, last]))
    [base] = editor.recipes
    recipe = editor.recipes.get(base)
    assert recipe is not None
    size = recipe.size
    noted = {"role": "assistant", "content": "noted"}
    other = editor.prepare(HEADERS, body([task, *[last, noted] * 32]), "messages")
    assert other is not None
    assert other.base == base
    assert other.kept < size / 2  # the task and the status line, once
    assert deliver(editor, registry, other).kept
    assert base in editor.recipes  # not dropped
    question = {"role": "user", "content": "and now fix them, one by one, carefully " * 3}
    nxt = body([task, long, last, {"role": "assistant", "content": "ok"}, question])
    assert sum(send(editor, registry, HEADERS, nxt).sent) < len(answer) // 8
