"""`toolref.edits.answer` for OpenAI Responses and Gemini streams (`answer_items`): the
output items and the model's parts as the agent writes them back (Codex CLI, Gemini CLI),
the same however the stream is cut, none unless it ended whole, given up past
`MAX_ANSWER`; and the next turn's edit is smaller against them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import js_answer_vectors as vectors
from tests.support.fake_provider import wire as provider
from tests.unit.edits.oracle import Registry, send
from toolref.edits import wire
from toolref.edits.answer import MAX_ANSWER, SINCE, AnswerTap, tap_for
from toolref.sending.answers import read_answer
from toolref.sending.editor import Editor

RESPONSES = "/v1/responses"
GEMINI = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
EVENT_STREAM = [("content-type", "text/event-stream")]
CALL = provider.Reply(call=provider.Call("shell", {"command": ["bash", "-lc", "ls"]}), index=1)
PATCH = provider.Reply(call=provider.Call("apply_patch", {}, input=vectors.PATCH), index=2)
TEXT = provider.Reply(text="The tests pass: 42 passed in 3.1s. Next I will tidy the module.")
HEADERS = [("content-type", "application/json"), ("authorization", "Bearer k")]


def stream(api: provider.Api, reply: provider.Reply) -> bytes:
    return b"".join(provider.frames(api, reply, "m", 10, usage=True))


def tapped(path: str, data: bytes, pieces: list[int]) -> bytes | None:
    tap = tap_for(path, 200, EVENT_STREAM)
    assert tap is not None
    at = 0
    for size in [*pieces, len(data)]:
        if tap.feed(data[at : at + size]):
            return tap.answer
        at += size
    return tap.answer


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@given(st.lists(st.integers(min_value=1, max_value=97), max_size=40))
def test_any_cut_of_the_stream_makes_the_same_answer(pieces: list[int]) -> None:
    apis: list[tuple[str, provider.Api]] = [(RESPONSES, "responses"), (GEMINI, "gemini")]
    for path, api in apis:
        for reply in (CALL, PATCH, TEXT):
            data = stream(api, reply)
            whole = tapped(path, data, [])
            assert whole is not None
            assert tapped(path, data, pieces) == whole
            assert tapped(path, data.replace(b"\n", b"\r\n"), pieces) == whole


def test_responses_items_are_written_back_as_codex_writes_them() -> None:
    """Codex sends back each `output_item.done` item re-serialized: its id dropped, its
    members in its own order; the call's arguments follow, as the model wrote them."""
    answer = tapped(RESPONSES, stream("responses", CALL), [])
    call = {"type": "function_call", "name": "shell", "arguments": CALL.arguments}
    assert answer == compact([call | {"call_id": "call_e2e_001"}]) + b"\n" + CALL.arguments.encode()
    text = tapped(RESPONSES, stream("responses", TEXT), [])
    entry = {"type": "output_text", "text": TEXT.text}
    assert text == compact([{"type": "message", "role": "assistant", "content": [entry]}])
    patch = tapped(RESPONSES, stream("responses", PATCH), [])
    assert patch is not None
    assert patch.endswith(b"\n" + vectors.PATCH.encode())  # a custom call's input, as written


def test_responses_reasoning_and_several_items_in_output_order() -> None:
    data = next(data for name, _, data in vectors.CASES if name == REASONED)
    answer = vectors.made("openai-responses", data)
    assert answer is not None
    listed = json.loads(answer.split(b"\n", 1)[0])
    assert [item["type"] for item in listed] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
    ]
    assert listed[0]["encrypted_content"] == vectors.REASONING["encrypted_content"]
    assert all("id" not in item for item in listed)


REASONED = "responses: reasoning, text, a function call and a custom call, deltas repeating them"


@pytest.mark.parametrize(
    "end",
    [{"type": "response.failed"}, {"type": "response.incomplete"}, {"type": "error"}],
)
def test_a_responses_stream_that_did_not_complete_is_none(end: dict[str, Any]) -> None:
    data = stream("responses", TEXT).replace(b"response.completed", end["type"].encode())
    assert tapped(RESPONSES, data, []) is None
    tap = AnswerTap("openai-responses")
    tap.feed(vectors.sse(vectors.item_done(0, vectors.MESSAGE), end))
    assert tap.failed


def test_gemini_parts_are_written_back_as_gemini_cli_merges_them() -> None:
    """Gemini CLI drops thoughts and adds a plain text part to the one before it (when that
    one's text is not empty); a part carrying a thoughtSignature stays apart."""
    data = vectors.sse(
        vectors.gemini({"text": "Plan", "thought": True}, {"text": ""}, {"text": "Run"}),
        vectors.gemini({"text": "ning"}),
        vectors.gemini({"text": " tests", "thoughtSignature": "c2ln"}, {"text": "."}),
        vectors.gemini({"functionCall": {"name": "run", "args": {"n": 1}}}, finish="STOP"),
    )
    parts = [
        {"text": ""},
        {"text": "Running"},
        {"text": " tests", "thoughtSignature": "c2ln"},
        {"text": "."},
        {"functionCall": {"name": "run", "args": {"n": 1}}},
    ]
    assert tapped(GEMINI, data, [3]) == compact({"role": "model", "parts": parts})
    text = tapped(GEMINI, stream("gemini", TEXT), [])
    assert text == compact({"role": "model", "parts": [{"text": TEXT.text}]})


def test_a_gemini_stream_without_a_finish_reason_or_with_an_error_is_none() -> None:
    data = stream("gemini", TEXT)
    unfinished = data.replace(b', "finishReason": "STOP"', b"")
    assert unfinished != data
    assert tapped(GEMINI, unfinished, []) is None
    errored = vectors.sse(vectors.gemini({"text": "a"}), {"error": {"code": 503}})
    assert tapped(GEMINI, errored, []) is None


@pytest.mark.parametrize("fmt", ["openai-responses", "gemini"])
def test_a_tap_gives_up_past_max_answer_and_drops_what_it_held(fmt: str) -> None:
    """Past MAX_ANSWER held bytes the tap fails at that event (as answer.ts), keeping none
    of it, while the stream reads on; one byte under, the answer is made."""
    piece = "a" * 1024

    def event(n: int) -> dict[str, Any]:
        if fmt == "gemini":
            return vectors.gemini({"text": piece, "thoughtSignature": str(n)})
        item = {"type": "message", "role": "assistant", "content": [{"text": piece}]}
        return vectors.item_done(n, item)

    tap = AnswerTap(fmt)
    for n in range(300):
        tap.feed(vectors.sse(event(n)))
        if tap.failed:
            break
    assert tap.failed
    assert 200 < n < 300  # at the event that passed the bound, not at the end
    assert tap._held > MAX_ANSWER
    tap.feed(vectors.sse(event(n + 1)))
    assert tap.answer is None


def test_the_vectors_hold_the_new_formats() -> None:
    made = {c["format"] for c in vectors.build() if c["answer"] is not None}
    assert {"openai-responses", "gemini"} <= made


def next_edit(key: str, first: list[Any], written: Any, answer: bytes | None) -> int:
    """The size of the edit of the turn after `first`, whose answer the agent wrote back as
    `written`, with `answer` as the base's answer (or none)."""
    editor, registry = Editor(), Registry()

    def body(items: list[Any]) -> bytes:
        return json.dumps({"model": "m", key: items}).encode()

    ref = send(editor, registry, HEADERS, body(first), key).answer.history
    assert ref is not None
    editor.answered(ref, answer)
    user = first[0] | ({"content": "go on"} if key == "input" else {"parts": [{"text": "go"}]})
    edit = editor.prepare(HEADERS, body([*first, written, user]), key)
    assert edit is not None
    return len(edit.body)


LONG = provider.Reply(
    text=" ".join(f"step {n}: ran pytest -q on module_{n}.py, {n * 7} passed" for n in range(60))
)


def test_the_next_turns_edit_is_smaller_against_a_responses_answer() -> None:
    answer = tapped(RESPONSES, stream("responses", LONG), [])
    assert answer is not None
    first = [{"type": "message", "role": "user", "content": "run the tests " * 20}]
    entry = {"type": "output_text", "text": LONG.text}
    written = {"type": "message", "role": "assistant", "content": [entry]}  # as Codex writes it
    with_answer = next_edit("input", first, written, answer)
    without = next_edit("input", first, written, None)
    assert with_answer < without - 200, (with_answer, without)


def test_the_next_turns_edit_is_smaller_against_a_gemini_answer() -> None:
    answer = tapped(GEMINI, stream("gemini", LONG), [])
    assert answer is not None
    first = [{"role": "user", "parts": [{"text": "run the tests " * 20}]}]
    written = {"role": "model", "parts": [{"text": LONG.text}]}  # as Gemini CLI writes it
    with_answer = next_edit("contents", first, written, answer)
    without = next_edit("contents", first, written, None)
    assert with_answer < without - 200, (with_answer, without)


@pytest.mark.parametrize("path", [RESPONSES, GEMINI])
def test_a_sender_to_a_receiver_of_version_5_taps_no_responses_or_gemini_answer(
    path: str,
) -> None:
    """A receiver of edits before version 6 keeps no answer of these formats: a sender
    tapping one there would compress the next turn against bytes the receiver lacks (a
    `dictionary-mismatch` and a resend, every turn). Below 6 no tap; from 6, one; the
    formats answers were kept for before, at any version from 3; a receiver taps all."""
    assert tap_for(path, 200, EVENT_STREAM, 5) is None
    assert tap_for(path, 200, EVENT_STREAM, 6) is not None
    assert tap_for(path, 200, EVENT_STREAM) is not None  # a receiver's own
    assert tap_for("/v1/messages", 200, EVENT_STREAM, 3) is not None
    assert tap_for("/v1/chat/completions", 200, EVENT_STREAM, 5) is not None
    assert max(SINCE.values()) <= wire.VERSION


@pytest.mark.parametrize("version", [5, 6])
def test_a_senders_read_answer_taps_by_its_receivers_version(version: int) -> None:
    """`read_answer` (the Python SDK's sender and the relay) is given the version its
    receiver reads, and taps a Responses answer only from 6."""
    told: list[bytes | None] = []
    data = stream("responses", TEXT)
    response = httpx.Response(200, headers=EVENT_STREAM, content=data)
    read_answer(response, RESPONSES, told.append, version)
    assert (told != []) is (version >= 6)


@pytest.mark.parametrize(("said", "tapped"), [("5", False), ("6", True), (None, True)])
def test_an_answer_from_a_receiver_of_5_is_no_dictionary_whatever_was_learnt_before(
    said: str | None, tapped: bool
) -> None:
    """Replicas rolled one by one (or one rolled back) while a sender runs: it learnt 6
    (the relay asks once per start), but this answer came from a receiver that says 5 in
    its `Toolref-Edits`, which kept none of it; tapped, the next turn would name an answer
    no one holds (`dictionary-mismatch` and a resend, every turn). The answer's own word
    wins; an answer saying none is read by what the sender learnt."""
    told: list[bytes | None] = []
    headers = [*EVENT_STREAM, *([] if said is None else [("toolref-edits", said)])]
    response = httpx.Response(200, headers=headers, content=stream("responses", TEXT))
    read_answer(response, RESPONSES, told.append, 6)
    assert (told != []) is tapped
