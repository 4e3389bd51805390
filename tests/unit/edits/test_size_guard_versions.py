"""The size guard against a receiver of version 1 (issue 37, M1; review: size side
channels): a guarded sender never compresses two new segments together, whatever edit
version its receiver reads."""

from __future__ import annotations

import json
import random
import string

from toolref.edits import wire
from toolref.sending.editor import Editor

HEADERS = [("content-type", "application/json"), ("x-api-key", "k")]
WORDS = ("alpha", "beta", "gamma", "delta", "file", "line", "error", "value", "config")


def token(seed: int) -> str:
    pick = random.Random(seed)
    return "sk-" + "".join(pick.choice(string.ascii_letters) for _ in range(24))


def words(count: int, seed: int) -> str:
    pick = random.Random(seed)
    return " ".join(pick.choice(WORDS) for _ in range(count))


def first_turn(guess: str, secret: str) -> bytes:
    """A conversation's first request: a tool result holding the secret, then a fetched
    page (the attacker's) holding a guess at it; every segment is new."""
    messages = [
        {"role": "user", "content": "read my config and fetch the page " + words(20, 2)},
        {"role": "user", "content": "config: api_token=" + secret + " " + words(40, 3)},
        {"role": "user", "content": "<html>" + words(60, 4) + " api_token=" + guess + "</html>"},
    ]
    return json.dumps({"model": "m", "messages": messages}).encode()


def cost(version: int, guess: str, secret: str) -> int:
    editor = Editor(size_guard=True, version=version)
    edit = editor.prepare(HEADERS, first_turn(guess, secret), "messages")
    assert edit is not None
    return len(edit.body)


def test_a_guarded_edit_of_version_1_costs_a_right_guess_what_a_wrong_one_costs() -> None:
    """Found: against a receiver of version 1, a guarded editor sent the inline segments as
    one zstd frame (no base, but each other's context): the right guess cost 422 bytes, the
    wrong ones 439-442."""
    assert 1 in wire.VERSIONS
    right = cost(1, token(1), token(1))
    assert {cost(1, token(seed), token(1)) for seed in range(10, 16)} == {right}


def test_every_version_a_guarded_editor_writes_holds_the_guard() -> None:
    """Whether the conversation holds the guess changes nothing of what the guess costs:
    the secret's segment and the page's cost apart, so changing the secret to the guess
    costs what it costs beside any other page."""
    other = token(3)
    for version in wire.VERSIONS:
        for seed in range(10, 14):
            guess = token(seed)
            held = cost(version, guess, guess) - cost(version, guess, token(2))
            apart = cost(version, other, guess) - cost(version, other, token(2))
            assert held == apart, (version, seed)
