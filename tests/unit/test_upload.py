"""`upload.prepare` (what a turn sends) and the manager's history fallbacks, without a server."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest
import zstandard

from toolref import ToolReferenceManager, formats, history
from toolref.history import chain_form, dictionary, heads, history_ref
from toolref.sending.rewrite import ref_of
from toolref.sending.upload import Prior, Turn, prepare
from toolref.wire import compression, headers
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import (
    DictionaryMismatchError,
    InvalidHistoryHeaderError,
    MissingHistoryError,
)
from toolref.wire.headers import HISTORY_HEADER

from .test_history import conversation

OPENAI = formats.get("openai-chat")


def turn_of(messages: list[Any], **body: Any) -> Turn:
    return Turn({"messages": messages, **body}, "messages", messages, messages, OPENAI)


def ref_at(messages: list[Any], length: int) -> str:
    return history_ref(heads(chain_form(messages, OPENAI))[length - 1])


def test_a_first_turn_sends_everything_and_asks_to_keep_it() -> None:
    messages = conversation(2)
    upload = prepare(turn_of(messages), {}, keep=True, compress=False)
    assert json.loads(upload.content) == {"messages": messages}
    assert upload.headers[HISTORY_HEADER] == "?1"
    assert upload.continued is None
    assert upload.head == ref_at(messages, len(messages))
    plain = prepare(turn_of(messages), {}, keep=False, compress=False)
    assert HISTORY_HEADER not in plain.headers
    assert plain.head is None


def test_a_later_turn_sends_the_messages_after_the_longest_confirmed_history() -> None:
    messages = conversation(4)
    confirmed = {ref_at(messages, 5): 5, ref_at(messages, 9): 9, "th_" + "a" * 26: 40}
    upload = prepare(turn_of(messages, model="m"), confirmed, keep=True, compress=False)
    assert json.loads(upload.content) == {
        "messages": messages[9:],
        "model": "m",
        "historyRef": ref_at(messages, 9),
    }
    assert upload.continued == ref_at(messages, 9)


def test_compressed_against_the_history_names_it_in_the_header() -> None:
    messages = conversation(4)
    ref = ref_at(messages, 9)
    upload = prepare(turn_of(messages, temperature=0.5), {ref: 9}, keep=True, compress=True)
    assert upload.dictionary
    assert upload.headers[HISTORY_HEADER] == ref
    assert upload.headers["Content-Encoding"] == "zstd"
    inflated = compression.decompress(upload.content, dictionary(messages[:9]), 10**6, ref)
    # The client's own JSON (key order and number forms as it writes them), not canonical.
    assert inflated == dumps_json({"messages": messages[9:], "temperature": 0.5})
    with pytest.raises(DictionaryMismatchError):
        compression.decompress(upload.content, dictionary(messages[:8]), 10**6, ref)


def test_unreadable_messages_travel_as_they_are() -> None:
    messages = [{"role": "user", "content": "hi"}]
    upload = prepare(
        Turn({"messages": messages}, "messages", messages, messages, None),
        {},
        keep=True,
        compress=True,
    )
    assert HISTORY_HEADER not in upload.headers
    assert json.loads(upload.content) == {"messages": messages}  # small: not compressed


def problem(kind: type[Exception], status: int) -> httpx.Response:
    slug = kind.slug  # type: ignore[attr-defined]
    return httpx.Response(
        status,
        json={"type": f"urn:toolref:problem:{slug}", "title": "x", "status": status, "detail": "x"},
        headers={"Content-Type": "application/problem+json", "Toolref-Protocol": "2"},
    )


class Server:
    """Confirms the head of every whole conversation; refuses continuations as told."""

    def __init__(self, refuse: type[Exception] | None = None, honest: bool = True) -> None:
        self.refuse, self.honest = refuse, honest
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        header = request.headers.get(HISTORY_HEADER, "")
        compressed = request.headers.get("content-encoding") == "zstd"
        if self.refuse is DictionaryMismatchError and compressed and header.startswith("th_"):
            return problem(DictionaryMismatchError, 400)
        if self.refuse is MissingHistoryError and (header.startswith("th_") or not compressed):
            body = json.loads(request.content)
            if "historyRef" in body:
                return problem(MissingHistoryError, 409)
        if compressed:
            return httpx.Response(200, json={}, headers={"Toolref-Protocol": "2"})
        messages = json.loads(request.content)["messages"]
        head = ref_at(messages, len(messages)) if self.honest else "th_" + "b" * 26
        return httpx.Response(200, json={}, headers={"Toolref-Protocol": "2", HISTORY_HEADER: head})


def chat(server: Server, manager: ToolReferenceManager, messages: list[Any]) -> None:
    with httpx.Client(transport=httpx.MockTransport(server), base_url="http://b") as client:
        assert manager.post(client, "/chat", json={"messages": messages}).status_code == 200


def test_a_dictionary_mismatch_is_resent_without_the_dictionary() -> None:
    server = Server(DictionaryMismatchError)
    manager = ToolReferenceManager()
    chat(server, manager, conversation(2))
    chat(server, manager, conversation(3))
    _first, refused, resent = server.requests
    assert refused.headers["content-encoding"] == "zstd"
    assert "content-encoding" not in resent.headers
    assert json.loads(resent.content)["historyRef"] == refused.headers[HISTORY_HEADER]
    assert manager.savings.fallbacks == 1


def test_a_missing_history_is_forgotten_and_the_whole_conversation_resent() -> None:
    server = Server(MissingHistoryError)
    manager = ToolReferenceManager(compress=False)
    chat(server, manager, conversation(2))
    assert len(manager.histories) == 1
    chat(server, manager, conversation(3))
    _, refused, resent = server.requests
    assert "historyRef" in json.loads(refused.content)
    # The whole conversation, with the payloads the confirmed history held as refs.
    whole = conversation(3)
    found = formats.scan(whole, OPENAI)
    held = {ref_of(p) for p in formats.scan(conversation(2), OPENAI).complete}
    markers = {p.key: ref_of(p) for p in found.complete if ref_of(p) in held}
    assert markers
    assert json.loads(resent.content) == {"messages": formats.replace(whole, found, markers)}
    assert ref_at(conversation(2), 9) not in manager.histories
    assert list(manager.histories.values()) == [len(conversation(3))]


def test_a_head_the_client_did_not_compute_is_never_used() -> None:
    server = Server(honest=False)
    manager = ToolReferenceManager()
    chat(server, manager, conversation(2))
    chat(server, manager, conversation(3))
    assert not manager.histories
    assert not manager.histories_accepted
    assert all(
        HISTORY_HEADER in r.headers and r.headers[HISTORY_HEADER] == "?1" for r in server.requests
    )


def test_history_refs_can_be_turned_off() -> None:
    server = Server()
    manager = ToolReferenceManager(history_refs=False)
    chat(server, manager, conversation(2))
    chat(server, manager, conversation(3))
    assert all(HISTORY_HEADER not in r.headers for r in server.requests)


def test_a_body_compressed_against_the_window_decodes_with_the_whole_dictionary() -> None:
    """The client compresses against the dictionary's last COMPRESS_WINDOW bytes; the server
    inflates with the whole (1 MiB at most): the same body, whatever the history's length."""
    whole = b"".join(
        b'{"role":"tool","content":"line %d of an old file"}' % n for n in range(20_000)
    )
    assert len(whole) > 4 * history.COMPRESS_WINDOW
    body = whole[-5_000:] + b'{"role":"user","content":"and now something new"}'
    packed = compression.compress(body, whole[-history.COMPRESS_WINDOW :], history.DICTIONARY_LEVEL)
    assert len(packed) < len(body) // 10  # it did use the window
    assert compression.decompress(packed, whole, 2**20, "th_x") == body


def _prior_for(messages: list[Any], length: int, **body: Any) -> tuple[str, Prior]:
    """The history of `messages[:length]` and the body a server kept for it."""
    kept = prepare(turn_of(messages[:length], **body), {}, keep=True, compress=False)
    assert kept.first is not None
    return ref_at(messages, length), Prior(kept.first, kept.text)


def test_a_continuation_compresses_against_the_history_and_the_body_kept() -> None:
    """The frame decodes with the whole primed dictionary, as a server rebuilds it: the
    history's dictionary followed by the body of the request it was confirmed for."""
    messages = conversation(4)
    tools = [
        {"name": f"t{i}", "description": random.Random(i).randbytes(200).hex()} for i in range(30)
    ]
    ref, prior = _prior_for(messages, 9, tools=tools)
    turn = turn_of(messages, tools=tools)
    upload = prepare(turn, {ref: 9}, keep=True, compress=True, priors={ref: prior})
    assert upload.headers[headers.DICTIONARY_HEADER] == ref == upload.prior
    primed = history.primed(dictionary(messages[:9]), prior.body)
    body = compression.decompress(upload.content, primed, 1 << 24, ref)
    assert body == upload.text == dumps_json({"messages": messages[9:], "tools": tools})
    plain = prepare(turn, {ref: 9}, keep=True, compress=True)
    assert headers.DICTIONARY_HEADER not in plain.headers
    assert plain.prior is None
    assert len(upload.content) * 20 < len(plain.content)  # the tools cost next to nothing


def test_a_conversation_resent_whole_compresses_against_its_last_body() -> None:
    """The last message changed (a moved cache mark): no history is a prefix, the whole
    conversation travels, against the body kept for its last history; another
    conversation's kept body is never used, even when its own is missing (it was, before
    issue 28: compressed against another conversation, a body's size told a sender what
    that conversation held)."""
    messages = conversation(4)
    ref, prior = _prior_for(messages, 9)
    changed = [*messages[:8], {**messages[8], "cache": True}, *messages[9:]]
    other_ref, other = _prior_for(conversation(3)[1:], 3)
    priors = {ref: prior, other_ref: other}  # the other one is more recent
    upload = prepare(turn_of(changed), {ref: 9}, keep=True, compress=True, priors=priors)
    assert upload.continued is None
    assert upload.prior == ref
    primed = history.primed(dictionary(messages[:9]), prior.body)
    assert compression.decompress(upload.content, primed, 1 << 24, ref) == upload.text
    assert json.loads(upload.text) == {"messages": changed}
    alone = prepare(turn_of(changed), {}, keep=True, compress=True, priors={other_ref: other})
    assert alone.prior is None
    assert headers.DICTIONARY_HEADER not in alone.headers
    assert other.body not in zstandard.ZstdDecompressor().decompress(alone.content)


def test_a_conversation_with_the_same_system_prompt_is_another_conversation() -> None:
    """Chat Completions puts the system prompt first: every conversation of an agent shares
    it. A new one (another first user message) gets no kept body of the other, whether sent
    whole or continuing the system prompt's history (a history that short is a prefix of
    both). Before issue 28 both used the other's body: the first as the fallback, the
    second because the body kept with a history was used for any continuation of it."""
    secret = conversation(2)  # [system, user, ...]: the body kept holds its tool results
    ref, prior = _prior_for(secret, 5)
    system_ref = ref_at(secret, 1)
    probe = [secret[0], {"role": "user", "content": "line 0\nline 0\nline 0"}]
    priors = {ref: prior, system_ref: prior}  # a checkpoint shares its head's body
    whole = prepare(turn_of(probe), {}, keep=True, compress=True, priors=priors)
    after = prepare(turn_of(probe), {system_ref: 1}, keep=True, compress=True, priors=priors)
    assert after.continued == system_ref
    for upload in (whole, after):
        assert upload.prior is None
        assert headers.DICTIONARY_HEADER not in upload.headers
    # The conversation itself, continued, still uses its body.
    own = prepare(turn_of(conversation(3)), {ref: 5}, keep=True, compress=True, priors=priors)
    assert own.prior == ref


def test_claude_code_s_second_turn_is_its_first_turn_s_conversation() -> None:
    """Claude Code marks the newest user message's last block (`cache_control`): on the
    first turn that is the first message, on the second it no longer is. The conversation
    is known by its opening without marks, so the second turn, resent whole, compresses
    against the first turn's body."""
    anthropic = formats.get("anthropic")
    mark = {"type": "ephemeral"}
    first = [
        {"role": "user", "content": [{"type": "text", "text": "fix it", "cache_control": mark}]}
    ]
    kept = prepare(
        Turn({"messages": first}, "messages", first, first, anthropic),
        {},
        keep=True,
        compress=False,
    )
    assert kept.first is not None
    prior = Prior(kept.first, kept.text)
    ref = history.history_ref(kept.chain[-1])
    second = [
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": mark}]},
    ]
    turn = Turn({"messages": second}, "messages", second, second, anthropic)
    upload = prepare(
        turn, {ref: 1}, keep=True, compress=True, priors={ref: prior}, openings={ref: kept.first}
    )
    assert upload.continued is None  # the marked first message is no prefix
    assert upload.prior == ref
    assert upload.rewound  # so it asks for its checkpoint, which the next turn continues


def test_the_dictionary_header_must_name_a_history() -> None:
    assert history.dictionary_header(None) is None
    assert history.dictionary_header(" th_" + "a" * 26 + " ") == "th_" + "a" * 26
    with pytest.raises(InvalidHistoryHeaderError, match="is not a history ref"):
        history.dictionary_header("tr_" + "a" * 26)


def test_priors_are_bounded_and_one_per_conversation() -> None:
    manager = ToolReferenceManager(max_prior_bytes=20_000)
    with pytest.raises(ValueError, match="max_prior_bytes must be >= 0"):
        ToolReferenceManager(max_prior_bytes=-1)
    messages = conversation(4)
    for length in (3, 5, 9):
        kept = prepare(turn_of(messages[:length]), {}, keep=True, compress=False)
        manager._keep_prior([ref_at(messages, length)], kept)
    assert list(manager.priors) == [ref_at(messages, 9)]  # one per conversation
    big = prepare(turn_of(conversation(40)), {}, keep=True, compress=False)
    assert len(big.text) > 20_000
    manager._keep_prior([ref_at(conversation(40), 3)], big)  # over the bound: not kept
    assert list(manager.priors) == [ref_at(messages, 9)]
