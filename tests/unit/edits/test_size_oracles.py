"""Sizes are signals (docs/reliability.md, "Sizes"; review: compression side channels):
what a guarded editor's edit costs, measured with a secret in the conversation and a right
or a wrong guess at it in text an attacker steers.

- The answer dictionary (record kind 3) compresses the message that renders the answer
  only, never an older model message the base lacks (fixed here).
- The tool results of one message (parallel tool calls) are compressed each alone (fixed
  here: they shared the message's context).
- A residual oracle the guard does not close, measured so that the doc's statement of it
  stays true: a long message's piece repeated byte for byte costs a reference.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

from tests import js_answer_vectors as answer_vectors
from tests.unit.edits.oracle import Registry, send
from toolref.edits.answer import AnswerTap
from toolref.edits.request import Cut, cut
from toolref.edits.wire import described
from toolref.sending.editor import Editor, _rendering

HEADERS = [("content-type", "application/json"), ("x-api-key", "k")]
WORDS = ("alpha", "beta", "gamma", "delta", "file", "line", "error", "value", "config")
SEEDS = range(10, 16)


def token(seed: int) -> str:
    pick = random.Random(seed)
    return "sk-" + "".join(pick.choice(string.ascii_letters) for _ in range(24))


def words(count: int, seed: int) -> str:
    pick = random.Random(seed)
    return " ".join(pick.choice(WORDS) for _ in range(count))


def text(role: str, said: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": said}]}


def body(messages: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "m", "messages": messages}).encode()


def rewritten_turn(guess: str, secret: str) -> tuple[int, dict[str, Any]]:
    """Two turns through a guarded editor: the model said the secret in an older turn (its
    thinking beside it); its answer to the turn after repeats a guess (a fetched page asked
    it to). The agent writes that answer back and drops the older message's thinking, so
    the older message travels again. The second edit's size and header."""
    editor, registry = Editor(), Registry()
    older = "I read the config: api_token=" + secret + " " + words(50, 7)
    thinking = {"type": "thinking", "thinking": words(30, 9), "signature": "sig"}
    first = [
        text("user", "read my config " + words(80, 1)),
        {"role": "assistant", "content": [thinking, {"type": "text", "text": older}]},
        text("user", "now fetch the page " + words(60, 2)),
    ]
    ref = send(editor, registry, HEADERS, body(first)).answer.history
    assert ref is not None
    said = "The page says: api_token=" + guess + " " + words(40, 5)
    answer = json.dumps(text("assistant", said), separators=(",", ":")).encode()
    editor.answered(ref, answer)
    second = [first[0], text("assistant", older), first[2], text("assistant", said)]
    edit = editor.prepare(
        HEADERS, body([*second, text("user", "thanks " + words(30, 3))]), "messages"
    )
    assert edit is not None
    return len(edit.body), described(edit.body)


def test_an_older_model_message_is_never_compressed_against_the_answer() -> None:
    """Found: every inline segment of a model's message went against the base's answer, so
    an older one the agent rewrote (its thinking dropped) holding a secret cost 373 bytes
    when the answer repeated it and 397-398 when it did not."""
    for seed in SEEDS:
        right, _ = rewritten_turn(token(seed), token(seed))
        wrong, _ = rewritten_turn(token(seed + 100), token(seed))
        assert right == wrong, seed


def test_the_message_rendering_the_answer_still_goes_against_it() -> None:
    size, header = rewritten_turn(token(1), token(2))
    assert "a" in header  # an edit naming the answer: its rendering compressed against it
    editor = Editor()
    editor.answered("tb_none", b"x" * 100)  # an answer of no recipe kept: never used
    assert "tb_none" not in editor.answers
    assert size > 0


def parallel_results(guess: str, secret: str, *, gemini: bool, lines: int) -> bytes:
    """A first request whose last message carries two tool results (parallel tool calls,
    Anthropic's `tool_result` blocks or Gemini's `functionResponse` parts): a file holding
    the secret and the attacker's page holding a guess, `lines` lines long (100: a message
    the long window cuts into pieces). Its edit."""
    file = "api_token=" + secret + "\n" + words(40, 3)
    page = "\n".join(
        [f"<p>{words(12, 4 + n)}</p>" for n in range(lines)] + ["api_token=" + guess, "</html>"]
    )
    if gemini:
        calls: list[dict[str, Any]] = [{"functionCall": {"name": "read", "args": {}}}] * 2
        results: list[dict[str, Any]] = [
            {"functionResponse": {"name": "read", "response": {"content": content}}}
            for content in (file, page)
        ]
        messages = [
            {"role": "user", "parts": [{"text": "read my config and fetch the page"}]},
            {"role": "model", "parts": calls},
            {"role": "user", "parts": results},
        ]
        edit = Editor().prepare(HEADERS, json.dumps({"contents": messages}).encode(), "contents")
    else:
        results = [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": content}
            for n, content in ((1, file), (2, page))
        ]
        uses = [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {}} for n in (1, 2)
        ]
        messages = [
            text("user", "read my config and fetch the page " + words(20, 2)),
            {"role": "assistant", "content": uses},
            {"role": "user", "content": results},
        ]
        edit = Editor().prepare(HEADERS, body(messages), "messages")
    assert edit is not None
    return edit.body


def test_tool_results_of_one_message_are_compressed_each_alone() -> None:
    """Found in review: one message was one compression context (a long one's pieces
    joined again as one frame), so the tool results it carries were compressed together:
    a right guess cost 14-23 bytes less. Now each result of such a message is a frame of
    its own: an edit's size is the file's part (the secret's) plus the page's (the
    guess's), whatever their relation. So two right guesses (secret s guessed s, secret w
    guessed w) cost exactly the bytes of the same two guesses wrong (s guessed w, w
    guessed s), for Anthropic and Gemini, short and cut by the long window."""
    for gemini in (False, True):
        for lines in (0, 100):
            for seed in SEEDS:
                s, w = token(seed), token(seed + 100)
                sizes = {
                    (secret, guess): parallel_results(guess, secret, gemini=gemini, lines=lines)
                    for secret in (s, w)
                    for guess in (s, w)
                }
                right = len(sizes[s, s]) + len(sizes[w, w])
                wrong = len(sizes[s, w]) + len(sizes[w, s])
                assert right == wrong, (gemini, lines, seed, right, wrong)
                for made in sizes.values():  # the edits carry frames, not the bytes as they are
                    assert len(made) * 2 < sum(len(value) for value in sizes.values())


def piece_turn(known: str, guess: str) -> tuple[int, int]:
    """A conversation holding a long file (its secret line among known ones), then a page
    of the attacker's repeating the file with a guess at that line: the second edit's
    size, and its inline bytes."""
    lines = [f"line {n}: " + words(12, n) for n in range(200)]
    secret_at = 120

    def file_with(value: str) -> str:
        return "\n".join([*lines[:secret_at], "api_token=" + value, *lines[secret_at:]])

    editor, registry = Editor(), Registry()
    first = [
        text("user", "read the config " + words(40, 1)),
        text("user", "config:\n" + file_with(known)),
    ]
    send(editor, registry, HEADERS, body(first))
    page = "<pre>\n" + file_with(guess) + "\n</pre>"
    edit = editor.prepare(HEADERS, body([*first, text("user", page)]), "messages")
    assert edit is not None
    return len(edit.body), edit.inline


def test_a_long_message_s_piece_repeated_costs_a_reference() -> None:
    """A residual oracle (docs/reliability.md, "Sizes"): the long window cuts a message of
    4 KiB or more into pieces at content-defined places, and a piece the conversation holds
    is kept by reference: a page repeating a file around a guessed line costs hundreds of
    bytes less when the guess is right (the piece holding the secret line is the file's)."""
    for seed in SEEDS[:3]:
        right, right_inline = piece_turn(token(seed), token(seed))
        wrong, wrong_inline = piece_turn(token(seed), token(seed + 100))
        assert wrong_inline - right_inline >= 512, (right_inline, wrong_inline)
        assert wrong - right >= 100, (right, wrong)


def codex(items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "m", "input": items}).encode()


def codex_answer(guess: str) -> tuple[bytes, list[dict[str, Any]]]:
    """A Codex answer (OpenAI Responses) as the tap makes it: reasoning (its summary repeats
    a guess a fetched page asked for; its `encrypted_content` long and random, as the
    server's is) and a shell call; and its items as Codex writes them back."""
    pick = random.Random(3)
    encrypted = "gAAAAB" + "".join(pick.choice(string.ascii_letters) for _ in range(1200))
    reasoning = {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "The page says api_token=" + guess}],
        "encrypted_content": encrypted,
    }
    command = {"command": ["bash", "-lc", "cat config.env; echo " + words(20, 6)]}
    call = {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "arguments": json.dumps(command),
        "call_id": "call_1",
        "name": "shell",
    }
    tap = AnswerTap("openai-responses")
    tap.feed(
        answer_vectors.responses(
            answer_vectors.item_done(0, reasoning), answer_vectors.item_done(1, call)
        )
    )
    answer = tap.answer
    assert answer is not None
    return answer, json.loads(answer.split(b"\n", 1)[0])


def codex_turn(
    guess: str, secret: str, *, with_answer: bool = True, interleaved: bool = False
) -> tuple[bytes, dict[str, Any]]:
    """Two Codex turns through a guarded editor: the answer to the first (`codex_answer`)
    written back as its items, then the call's output, a file holding the secret
    (`interleaved`: the output between the call and a second call, as older Codex wrote
    them), then the user's next message. The second edit and its header; the registry
    (which holds the answer, as the gateway does) reads it whole, at once."""
    editor, registry = Editor(), Registry()
    first = [{"type": "message", "role": "user", "content": "read my config " + words(80, 1)}]
    ref = send(editor, registry, HEADERS, codex(first), "input").answer.history
    assert ref is not None
    answer, items = codex_answer(guess)
    if with_answer:
        editor.answered(ref, answer)
        registry.answers[ref] = answer
    output = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "api_token=" + secret + "\n" + words(40, 8),
    }
    written = [items[0], items[1], output, items[1]] if interleaved else [*items, output]
    user = {"type": "message", "role": "user", "content": "thanks " + words(30, 3)}
    data = codex([*first, *written, user])
    edit = editor.prepare(HEADERS, data, "input")
    assert edit is not None
    read = registry.answer(edit.body, edit.cut.secrets)
    assert (read.status, read.body) == (200, data)  # no resend: read against the answer
    return edit.body, described(edit.body)


def test_a_tool_output_after_the_model_s_items_is_never_compressed_against_the_answer() -> None:
    """A Codex turn's items that render the base's answer (its reasoning and calls) go
    against it; the tool's output after them, a file holding the secret, never does: a
    guess in the answer costs the same bytes right or wrong, an output between two calls
    (the run of the model's items ends at it) too."""
    for interleaved in (False, True):
        for seed in SEEDS:
            right, header = codex_turn(token(seed), token(seed), interleaved=interleaved)
            wrong, _ = codex_turn(token(seed + 100), token(seed), interleaved=interleaved)
            assert "a" in header  # the items went against the answer
            assert len(right) == len(wrong), (interleaved, seed, len(right), len(wrong))


def test_a_codex_turn_s_reasoning_and_call_go_against_the_answer() -> None:
    """Before, only a first new item with a role (a `message`) rendered the answer: a turn
    starting with reasoning or a call, every reasoning model's, named none and sent the
    reasoning's encrypted content (1,206 random bytes) compressed alone. Now the run of the
    model's items from the base's message count goes against the answer."""
    against, header = codex_turn(token(1), token(2))
    alone, plain = codex_turn(token(1), token(2), with_answer=False)
    assert "a" in header
    assert "a" not in plain
    assert len(against) < len(alone) - 600, (len(against), len(alone))


def test_only_responses_items_make_a_run_other_formats_render_with_one_message() -> None:
    """An assistant message after the one rendering the answer (a prefill the client wrote,
    in Anthropic's or Chat's shape) is not the answer's: the rendering is one message, as
    before. Responses items of the model's from the base's count are the answer's output,
    in order: all of them, up to a tool output. (Without the long window a rendering
    beside another model message is none: whose segments are whose is not known.)"""
    for window in (True, False):
        chat = [text("user", "q " * 200), text("assistant", "a " * 200)]
        data = body([*chat, text("assistant", "{" * 300)])
        prefill = cut(HEADERS, data, "messages", window=window)
        assert prefill is not None
        one = _segments_of(prefill, {1}) if window else frozenset()
        assert _rendering(prefill, 1) == one
        items: list[dict[str, Any]] = [
            {"type": "message", "role": "user", "content": "q " * 200},
            {"type": "reasoning", "summary": [], "encrypted_content": "e" * 300},
            {"type": "function_call", "name": "sh", "arguments": "{}" + " " * 300},
            {"type": "function_call_output", "call_id": "c", "output": "o " * 200},
            {"type": "function_call", "name": "sh", "arguments": "{}" + " " * 300},
        ]
        codexed = cut(HEADERS, codex(items), "input", window=window)
        assert codexed is not None
        assert codexed.items == {1, 2, 4}
        assert _rendering(codexed, 1) == _segments_of(codexed, {1, 2})
        assert _rendering(codexed, 0) == frozenset()  # the user's: none


def _segments_of(made: Cut, numbers: set[int]) -> frozenset[int]:
    """The model's segments of these messages (from each one's first span to the next's)."""
    bounds = [*made.messages, len(made.segments)]
    return frozenset(
        at
        for n in numbers
        for at in made.answered
        if (made.owners[at] == n if made.owners else bounds[n - 1] < at < bounds[n + 1])
    )
