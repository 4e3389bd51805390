"""`toolref.sending.editor.Editor` against a registry written with the pure core
(`oracle`): every turn of every edit pattern (1, 2 and N moving cache marks, tool results as
text, calls never answered, edits, deletions and insertions in the middle, compaction,
regenerate, conversations interleaved, the registry restarted empty) reaches the registry
exactly as the agent wrote it, and costs within a stated bound of what changed, never of
where it changed or how long the conversation is."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.edits.agents import HEADERS, STYLES, Agent, turns
from tests.unit.edits.oracle import Answer, Registry, send
from toolref.edits import wire
from toolref.edits.recipe import RUN_MIN, is_piece
from toolref.edits.request import cut
from toolref.sending.editor import MAX_RESENDS, MISSING_HISTORY, Editor
from toolref.sending.recipes import Recipes, _shared_key
from toolref.wire.compression import compress
from toolref.wire.errors import DictionaryMismatchError

# Bytes of one turn's edit: FIXED (the header line, a zstd frame) plus, per segment of the
# request its conversation's previous request did not hold, its bytes and PER_CHANGE (its
# op, the ops of the kept ranges around it, the glue beside it).
FIXED = 160
PER_CHANGE = 64

ACTIONS = st.sampled_from(
    ["step", "step", "step", "edit", "delete", "insert", "compact", "regenerate"]
)


def changed(before: bytes | None, after: bytes) -> tuple[int, int] | None:
    """(bytes, count) of the segments of `after` that `before` (as cut) lacks; None when
    they share no message (not the same conversation: `after` takes no base). A message is
    identified by its entry (a piece's id, or a literal of `RUN_MIN` bytes or more)."""
    new = cut(HEADERS, after, "messages")
    assert new is not None
    old = cut(HEADERS, before, "messages") if before is not None else None
    held = set(old.entries) if old is not None else set()
    if not any(
        (is_piece(new.entries[i]) or len(new.entries[i]) > RUN_MIN) and new.entries[i] in held
        for i in new.messages
    ):
        return None
    fresh = [s for e, s in zip(new.entries, new.segments, strict=True) if e not in held]
    return sum(map(len, fresh)), len(fresh)


def within(sent: int, before: bytes | None, after: bytes) -> bool:
    """The bound of a turn: FIXED, and per segment the previous request lacks, its bytes
    and PER_CHANGE; a request sharing no message piece with it, at most its own size and
    FIXED (every piece named or inline)."""
    found = changed(before, after)
    if found is None:
        return sent <= FIXED + len(after)
    size, count = found
    return sent <= FIXED + size + PER_CHANGE * count


def act(agent: Agent, action: str) -> None:
    """One step of the conversation ("regenerate": the same request again)."""
    moves: dict[str, Callable[[], None]] = {
        "step": agent.step,
        "edit": agent.edit_middle,
        "delete": agent.delete_middle,
        "insert": agent.insert_middle,
        "compact": agent.compact,
    }
    if action in moves:
        moves[action]()


@given(
    st.sampled_from(STYLES),
    st.sampled_from([0, 1, 2, 5]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.lists(ACTIONS, min_size=1, max_size=25),
    st.integers(0, 10**6),
)
@settings(max_examples=60, deadline=None)
def test_every_turn_is_exact_and_costs_what_changed(
    style: str,
    marks: int,
    text_results: bool,
    unanswered: bool,
    odd: bool,
    actions: list[str],
    seed: int,
) -> None:
    agent = Agent(seed, style, marks, text_results, unanswered, odd)
    editor, registry = Editor(), Registry()
    before: bytes | None = None
    for action in ["step", *actions]:
        act(agent, action)
        body = agent.body()
        turn = send(editor, registry, HEADERS, body)
        assert turn.answer.body == body
        assert turn.answer.headers == HEADERS
        assert len(turn.sent) == 1  # nothing missed: no resend
        assert within(turn.sent[0], before, body), action
        before = body


@pytest.mark.parametrize("marks", [1, 2, 5])
def test_a_moving_mark_costs_a_few_bytes_not_its_message(marks: int) -> None:
    """A message that only lost its cache mark travels inline, but compressed against the
    base's copy of it: each turn costs the new messages and a few bytes per moved mark,
    however long the marked messages are."""
    agent = Agent(3, "compact", marks, text_results=True)
    editor, registry = Editor(), Registry()
    for _ in range(8):
        agent.step()
        send(editor, registry, HEADERS, agent.body())
    for _ in range(20):
        size_before = len(agent.messages)
        agent.step()
        new = agent.messages[size_before:]
        new_bytes = sum(len(str(m)) for m in new)
        turn = send(editor, registry, HEADERS, agent.body())
        assert turn.sent[0] <= FIXED + new_bytes + 48 * marks


@pytest.mark.parametrize("count", [2, 5])
def test_interleaved_conversations_are_each_sent_against_their_own(count: int) -> None:
    """Two and five conversations through one editor, turns interleaved: each turn's base
    is a recipe of its own conversation (never another's: no bytes of it are named, kept or
    in the dictionary), and costs what changed in it."""
    rng = random.Random(count)
    agents = [Agent(seed, STYLES[seed % 4], marks=seed % 3) for seed in range(count)]
    editor, registry = Editor(), Registry()
    refs: list[set[str]] = [set() for _ in agents]
    before: list[bytes | None] = [None] * count
    for _ in range(30 * count):
        which = rng.randrange(count)
        agents[which].step()
        body = agents[which].body()
        edit = editor.prepare(HEADERS, body, "messages")
        assert edit is not None
        assert edit.base is None or edit.base in refs[which]
        turn = send(editor, registry, HEADERS, body)
        assert turn.answer.body == body
        assert within(turn.sent[0], before[which], body)
        refs[which].add(edit.ref)
        before[which] = body


def test_a_new_conversation_names_the_envelope_and_takes_no_base() -> None:
    """A first turn shares `tools` and `system` with another conversation: those travel
    as piece ids, its messages inline, with no base and no dictionary of the other's."""
    editor, registry = Editor(), Registry()
    first = Agent(1)
    for body in turns(first, 5):
        send(editor, registry, HEADERS, body)
    other = Agent(2)
    other.step()
    edit = editor.prepare(HEADERS, other.body(), "messages")
    assert edit is not None
    assert edit.base is None
    header = wire.described(edit.body)
    assert "z" not in header
    assert any(str(op).startswith("tp_") for op in header["o"])  # the envelope, named
    assert send(editor, registry, HEADERS, other.body()).answer.body == other.body()


def test_a_registry_restarted_empty_is_recovered_from_by_itself() -> None:
    """All misses at once (missing history, then missing pieces): the turn is resent, at
    most `MAX_RESENDS` times, exact; the next turn costs what changed again."""
    agent = Agent(5, "spaced", marks=2)
    editor, registry = Editor(), Registry()
    for body in turns(agent, 10):
        send(editor, registry, HEADERS, body)
    registry.flush()
    agent.step()
    turn = send(editor, registry, HEADERS, agent.body())
    assert turn.answer.body == agent.body()
    assert 2 <= len(turn.sent) <= 1 + MAX_RESENDS
    before = agent.body()
    agent.step()
    turn = send(editor, registry, HEADERS, agent.body())
    assert len(turn.sent) == 1
    assert changed(before, agent.body()) is not None
    assert within(turn.sent[0], before, agent.body())


def test_pieces_the_registry_lost_are_sent_inline() -> None:
    """409 missing-pieces: the pieces named are sent again inline, and no longer named."""
    editor, registry = Editor(), Registry()
    for body in turns(Agent(1), 3):
        send(editor, registry, HEADERS, body)
    registry.pieces.clear()  # the recipes stay, their pieces expired
    other = Agent(2)
    other.step()
    turn = send(editor, registry, HEADERS, other.body())
    assert turn.answer.body == other.body()
    assert len(turn.sent) == 2


def test_a_dictionary_mismatch_is_resent_without_one() -> None:
    """400 dictionary-mismatch (the registry's dictionary differs from the editor's): the
    edit again, same base, its inline bytes plain zstd (unguarded: version 1)."""

    class Mismatching(Registry):
        mismatches = 0

        def answer(self, body: bytes, secrets: Sequence[tuple[str, str]]) -> Answer:
            header, _ = wire.read(body, 1 << 30)
            if header.dictionary:
                self.mismatches += 1
                return Answer(400, DictionaryMismatchError("another dictionary").to_problem())
            return super().answer(body, secrets)

    agent = Agent(4, marks=2)
    editor, registry = Editor(size_guard=False), Mismatching()
    for body in turns(agent, 8):
        turn = send(editor, registry, HEADERS, body)
        assert turn.answer.body == body
    assert registry.mismatches >= 3  # the moved marks compress against the base
    assert len(turn.sent) == 2


def test_every_resend_refused_ends_with_everything_inline() -> None:
    """A registry that answers missing-history to every edit with a base: the third resend
    carries everything inline, no base, nothing named; after it the editor gives up and the
    answer is the agent's."""
    editor = Editor()
    agent = Agent(6)
    agent.step()
    edit = editor.prepare(HEADERS, agent.body(), "messages")
    assert edit is not None
    problem = {"type": MISSING_HISTORY}
    for _ in range(MAX_RESENDS):
        following = editor.on_miss(edit, 409, problem)
        assert following is not None
        edit = following
    assert edit.whole
    assert edit.base is None
    assert not any(str(op).startswith("tp_") for op in wire.described(edit.body)["o"])
    assert editor.on_miss(edit, 409, problem) is None
    assert editor.on_miss(edit, 500, None) is None


def test_headers_beyond_the_credentials_are_the_media_type_alone() -> None:
    """Per continuation turn the editor adds one header line to the request's credentials
    (the agent's other headers are segment 0, kept by reference while unchanged)."""
    agent = Agent(7)
    editor, registry = Editor(), Registry()
    for body in turns(agent, 6):
        turn = send(editor, registry, HEADERS, body)
        assert turn.headers <= 48  # "Content-Type: application/vnd.toolref.edit\r\n"
    edit = editor.prepare(HEADERS, agent.body(), "messages")
    assert edit is not None
    assert wire.described(edit.body)["o"][0][0] == 0  # segment 0 kept with the rest


def test_memory_is_bounded_by_recipes_and_bytes() -> None:
    """At most `max_recipes` recipes and `max_bytes` counted; a request past `max_bytes`
    alone is not kept (its next turn travels whole, still exact)."""
    editor, registry = Editor(max_recipes=3, max_bytes=60_000), Registry()
    agents = [Agent(seed) for seed in range(6)]
    for _ in range(10):
        for agent in agents:
            agent.step()
            assert send(editor, registry, HEADERS, agent.body()).answer.body == agent.body()
            assert len(editor.recipes) <= 3
            assert editor.recipes.held_bytes <= 60_000
    small = Editor(max_bytes=1_000)
    assert send(small, registry, HEADERS, agents[0].body()).answer.body == agents[0].body()
    assert len(small.recipes) == 0


@pytest.mark.parametrize("shape", ["system changes", "window slides"])
def test_a_conversation_that_drops_what_it_held_holds_only_what_it_holds_now(shape: str) -> None:
    """One conversation, 200 turns, whose old content goes: a large system prompt (a piece)
    new every turn, or a window of the last 12 messages. What its dropped recipes held goes
    with them (a line living on kept every entry it ever held: 7 MB against a 4 MiB cap)."""
    editor, registry = Editor(max_bytes=4 << 20), Registry()
    rng = random.Random(7)
    messages: list[dict[str, str]] = []
    for n in range(200):
        messages.append({"role": "user", "content": f"turn {n}: " + "w" * rng.randrange(80, 400)})
        messages.append({"role": "assistant", "content": f"answer {n} " + "a" * 200})
        if shape == "system changes":
            system = f"prompt {n} " + "".join(rng.choice("abcdef") for _ in range(24_000))
            body = {"model": "m", "system": system, "messages": messages}
        else:
            body = {"model": "m", "messages": messages[-12:]}
        data = json.dumps(body).encode()
        assert send(editor, registry, HEADERS, data).answer.body == data
    recipes = editor.recipes
    assert recipes.held_bytes <= 4 << 20
    assert len(recipes._pieces) <= 2 * len(recipes)  # this turn's prompt and the last's
    kept = [recipe for ref in recipes if (recipe := recipes.get(ref)) is not None]
    held = {key for r in kept for e in r.entries if (key := _shared_key(e)) is not None}
    assert set().union(*(r.line.keys for r in kept)) == held  # what the kept recipes hold


def test_recipes_share_piece_bytes_and_free_them_with_the_last_holder() -> None:
    recipes = Recipes()
    one = cut(HEADERS, Agent(1).body(), "messages")
    assert one is not None
    recipes.keep(one.ref, one.entries, one.segments)
    alone = recipes.held_bytes
    agent = Agent(1)
    agent.messages.append({"role": "assistant", "content": "x"})
    two = cut(HEADERS, agent.body(), "messages")
    assert two is not None
    recipes.keep(two.ref, two.entries, two.segments)
    assert recipes.held_bytes < 2 * alone  # the shared pieces counted once
    recipes.drop(one.ref)
    recipes.drop(two.ref)
    assert recipes.held_bytes == 0


def test_what_is_not_one_json_object_is_sent_as_it_is() -> None:
    assert Editor().prepare(HEADERS, b"[1, 2]", "messages") is None
    assert Editor().prepare(HEADERS, b"\xff{}", "messages") is None


@pytest.mark.parametrize(("marks", "text_results"), [(0, False), (1, False), (2, True), (5, False)])
def test_a_conversation_costs_the_previous_body_baseline_and_its_header_line(
    marks: int, text_results: bool
) -> None:
    """Unguarded, over 40 turns, the edits' inline bytes cost no more than zstd of each body
    with the previous body as dictionary (issue 30's baseline), however the marks move: what
    an edit adds is its header line (base ref, ops, sizes: `LINE` bytes a turn at most
    here)."""
    agent = Agent(9, "compact", marks, text_results=text_results)
    editor, registry = Editor(size_guard=False), Registry()
    ours, baseline, previous, count = 0, 0, b"x", 40
    for body in turns(agent, count):
        ours += sum(send(editor, registry, HEADERS, body).sent)
        baseline += len(compress(body, previous, 3))
        previous = body
    assert ours <= baseline + LINE * count


LINE = 110
OP = 16


@pytest.mark.parametrize(("marks", "text_results"), [(0, False), (2, True)])
def test_a_guarded_conversation_costs_its_new_segments_each_compressed_alone(
    marks: int, text_results: bool
) -> None:
    """Size-guarded (the default), each turn costs at most its header line and each segment
    its base lacks compressed alone (or as it is), with `OP` bytes for its op, its record's
    kind and size, and the kept range after it: the cost of the guard is what those
    segments would have gained from the rest of the conversation, and nothing else."""
    agent = Agent(9, "compact", marks, text_results=text_results)
    editor, registry = Editor(), Registry()
    ours = alone = 0
    previous: bytes | None = None
    for body in turns(agent, 40):
        ours += sum(send(editor, registry, HEADERS, body).sent)
        new = cut(HEADERS, body, "messages")
        old = cut(HEADERS, previous, "messages") if previous is not None else None
        assert new is not None
        held = set(old.entries) if old is not None else set()
        for entry, segment in zip(new.entries, new.segments, strict=True):
            if entry not in held:
                alone += OP + min(len(segment), len(zstandard.compress(segment, 3)) + 3)
        alone += LINE
        previous = body
    assert ours <= alone


def test_a_short_message_in_common_relates_no_conversations() -> None:
    """Two conversations that both hold `{"role":"user","content":"continue"}` (under
    `RELATED_MIN` bytes) are not one: the second takes no base and no dictionary of the
    first, though the message is a literal both recipes hold; a long message in common
    (a repeated prompt) makes them one."""
    editor, registry = Editor(), Registry()
    short = {"role": "user", "content": "continue"}
    one, two = Agent(1), Agent(2)
    one.messages.append(short)
    send(editor, registry, HEADERS, one.body())
    two.messages = [short]
    edit = editor.prepare(HEADERS, two.body(), "messages")
    assert edit is not None
    assert edit.base is None
    again = Agent(1)  # the same first message as `one`: a repeat of its prompt
    edit = editor.prepare(HEADERS, again.body(), "messages")
    assert edit is not None
    assert edit.base is not None


@pytest.mark.parametrize("count", [2, 6])
def test_conversations_opening_alike_keep_each_its_own_base(count: int) -> None:
    """Conversations opening with the same long system prompt, their turns interleaved
    through one editor, cost what they cost one after another: a first turn sent against
    another conversation's recipe (the prompt in common) does not drop that recipe, which
    is not past (its conversation goes on); only a turn holding the base's last message
    continues it. Before, each conversation evicted the others' bases and every turn went
    nearly whole (2.35x the bytes with six)."""
    words = random.Random(1)
    system = " ".join(f"w{words.randrange(5000)}" for _ in range(1500))

    def bodies(seed: int, count_turns: int) -> list[bytes]:
        rng = random.Random(100 + seed)

        def text(n: int) -> str:
            return " ".join(f"w{rng.randrange(5000)}" for _ in range(n))

        messages: list[dict[str, str]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"task {seed}: {text(40)}"},
        ]
        out = []
        for _ in range(count_turns):
            out.append(json.dumps({"model": "m", "messages": messages}).encode())
            messages = [
                *messages,
                {"role": "assistant", "content": text(30)},
                {"role": "user", "content": "result: " + text(300)},
            ]
        return out

    conversations = [bodies(seed, 8) for seed in range(count)]

    def sent(order: list[tuple[int, int]]) -> int:
        editor, registry = Editor(), Registry()
        total = 0
        for which, turn in order:
            body = conversations[which][turn]
            result = send(editor, registry, HEADERS, body)
            assert result.answer.body == body
            total += sum(result.sent)
        return total

    apart = sent([(which, turn) for which in range(count) for turn in range(8)])
    interleaved = sent([(which, turn) for turn in range(8) for which in range(count)])
    assert interleaved <= 1.1 * apart
