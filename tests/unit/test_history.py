"""History refs: the digest chain, chain form and prefix matching (pure functions)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolref import formats
from toolref.history import (
    H0,
    HISTORY_REF_LENGTH,
    chain_form,
    check_history_ref,
    heads,
    history_ref,
    is_history_ref,
    longest_confirmed,
    message_digest,
)
from toolref.sending.rewrite import rewrite
from toolref.wire.canonical import canonical_json
from toolref.wire.errors import InvalidRefError


def conversation(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for n in range(turns):
        call = f"call_{n}"
        messages += [
            {"role": "user", "content": f"read file {n}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read", "arguments": f'{{"path": "f{n}.py"}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call, "content": f"line {n}\n" * 40},
            {"role": "assistant", "content": f"file {n} has 40 lines"},
        ]
    return messages


OPENAI = formats.get("openai-chat")


def test_the_chain_is_the_definition() -> None:
    form = chain_form(conversation(2), OPENAI)
    expected, head = [], H0
    for message in form:
        head = hashlib.sha256(head + canonical_json(message)).digest()
        expected.append(head)
    assert heads(form) == expected
    assert hashlib.sha256(b"toolref history v1").digest() == H0
    # Continuing from a head gives the same chain as hashing from the start.
    assert heads(form[3:], start=expected[2]) == expected[3:]


def test_chain_form_covers_refs_not_payloads() -> None:
    messages = conversation(3)
    form = chain_form(messages, OPENAI)
    assert "line 0" not in str(form)
    assert str(form).count("toolRef") == 6  # the call and its result carry the ref
    # Messages without tool payloads are the very same objects.
    assert form[0] is messages[0]
    assert form[1] is messages[1]
    assert chain_form(form, OPENAI) == form  # already in chain form: unchanged


@given(st.sets(st.integers(0, 4)))
def test_heads_do_not_depend_on_which_payloads_were_sent_as_refs(sent: set[int]) -> None:
    """A client sends some payloads as markers and some in full: same chain either way."""
    messages = conversation(5)
    found = formats.scan(messages, OPENAI)
    usable = {
        str(ref) for n, ref in enumerate(rewrite(messages, OPENAI, ()).refs.values()) if n in sent
    }
    partly = rewrite(messages, OPENAI, usable).messages
    assert len(formats.scan(partly, OPENAI).refs) == len(sent)
    assert found.complete  # there were payloads to replace
    assert heads(chain_form(partly, OPENAI)) == heads(chain_form(messages, OPENAI))


def test_history_refs_are_th_and_base32_of_the_head() -> None:
    head = heads(chain_form(conversation(1), OPENAI))[-1]
    ref = history_ref(head)
    assert ref.startswith("th_")
    assert len(ref) == HISTORY_REF_LENGTH == 29
    assert is_history_ref(ref)
    assert check_history_ref(ref) == ref
    assert history_ref(heads([{"role": "user", "content": "x"}])[-1]) != ref


@pytest.mark.parametrize(
    "bad", ["tr_" + "a" * 26, "th_" + "a" * 25, "th_" + "A" * 26, "th_" + "a" * 25 + "b", 7]
)
def test_anything_else_is_not_a_history_ref(bad: object) -> None:
    assert not is_history_ref(bad)
    with pytest.raises(InvalidRefError, match="not a history ref"):
        check_history_ref(bad)


def test_message_digest_is_sha256_of_canonical_json() -> None:
    message = {"role": "user", "content": "é", "b": 1}
    assert message_digest(message) == hashlib.sha256(canonical_json(message)).digest()


def test_longest_confirmed_prefix_survives_edits_and_truncation() -> None:
    messages = conversation(5)  # 21 messages
    chain = heads(chain_form(messages, OPENAI))
    confirmed = [(history_ref(chain[n - 1]), n) for n in (5, 9, 13, 17)]
    assert longest_confirmed(chain, confirmed) == 3

    edited = copy.deepcopy(messages)
    edited[10]["content"] = "rewritten by the user"
    chain = heads(chain_form(edited, OPENAI))
    assert longest_confirmed(chain, confirmed) == 1  # 9 messages are still the same

    truncated = heads(chain_form(messages[:12], OPENAI))
    assert longest_confirmed(truncated, confirmed) == 1
    assert longest_confirmed(heads(chain_form(messages[:3], OPENAI)), confirmed) == -1
    assert longest_confirmed(chain, []) == -1
