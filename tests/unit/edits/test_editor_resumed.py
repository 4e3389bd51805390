"""A turn cut on from the body before (`toolref.edits.bodycut`), sent against that body's
recipe (`Editor._resumed`), diffed over the segments both hold in one step and kept on its
base's bookkeeping, is the edit the pass over the whole request makes, byte for byte,
whatever the conversation did (steps, edits, deletions and insertions in the middle,
compaction, regenerate), and conversations interleaved keep their own lines."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.agents import HEADERS, STYLES, Agent
from tests.unit.edits.oracle import Registry, send
from tests.unit.edits.test_editor import ACTIONS, act
from toolref.edits import bodycut
from toolref.edits.recipe import is_piece, piece_of
from toolref.sending.editor import Editor
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
        body = agent.body()
        fast = resumed.prepare(HEADERS, body, "messages")  # cut on from the body before
        forget()
        slow = whole.prepare(HEADERS, body, "messages")  # from scratch
        assert fast is not None
        assert slow is not None
        assert slow.cut.same == 0
        assert (fast.body, fast.base, fast.ref) == (slow.body, slow.base, slow.ref)
        for editor, registry in zip((resumed, whole), registries, strict=True):
            turn = send(editor, registry, HEADERS, body)
            assert turn.answer.body == body


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
