"""The issue-30 bench's pure parts do what its report says: every synthetic pattern is a
valid conversation of its format that grows as its docstring says, the baseline is zstd
against the previous body of the same conversation under the agent's head, the hop counts
the bytes the relay wrote, and the report judges each figure against its target."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import zstandard
from loadtests import edits_baseline, edits_report, fast_upstream, patterns
from loadtests.bandwidth import on_the_wire
from loadtests.counting_hop import CountingHop, Sent
from loadtests.edits_bench import Plan, conversations, from_trace
from loadtests.measured import COUNTERS, Measured
from loadtests.patterns import PATTERNS, Pattern, encode
from loadtests.rawhttp import Connection, request
from loadtests.report import Section, replace_section

from toolref import formats
from toolref_server.storage import keys

TURNS = 30


def unmarked(value: Any) -> Any:
    """A body's part with its cache marks taken out (and a one-text-part list of an
    OpenAI message read as its text)."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def marked(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if "cache_control" in json.dumps(m)]


def history(pattern: Pattern, conversation: int = 0) -> list[list[dict[str, Any]]]:
    """Each turn's messages (unmarked, no system message) of one conversation."""
    found = []
    for turn in pattern.turns:
        if turn.conversation == conversation:
            found.append([m for m in unmarked(turn.messages) if m["role"] != "system"])
    return found


def calls_and_results(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    calls, results = [], []
    for message in messages:
        for call in message.get("tool_calls", []):
            calls.append(call["id"])
        if message["role"] == "tool":
            results.append(message["tool_call_id"])
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            elif block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
    return calls, results


@pytest.mark.parametrize("name", list(PATTERNS))
def test_every_pattern_is_a_valid_conversation_of_its_format(name: str) -> None:
    pattern = PATTERNS[name](TURNS, 3)
    assert len(pattern.turns) == TURNS * pattern.conversations
    assert pattern == PATTERNS[name](TURNS, 3)  # pure: the same bodies for the same seed
    assert pattern.turns[-1].body != PATTERNS[name](TURNS, 4).turns[-1].body
    assert formats.detect(pattern.turns[-1].messages).name == pattern.fmt
    for turn in pattern.turns:
        body = turn.body
        assert json.loads(encode(body)) == body
        roles = [m["role"] for m in turn.messages if m["role"] not in ("system", "tool")]
        assert roles[0] == roles[-1] == "user"  # a request ends with the user's turn
        assert all(a != b for a, b in itertools.pairwise(roles))  # alternating
        if pattern.fmt == "anthropic":
            assert body["system"]
            assert body["tools"]
            assert body["max_tokens"]
        else:
            assert turn.messages[0]["role"] == "system"
            assert body["tools"]
    calls, results = calls_and_results(pattern.turns[-1].messages)
    assert set(results) <= set(calls)  # a result answers a call of the conversation
    assert len(encode(pattern.turns[-1].body)) > 2 * len(encode(pattern.turns[0].body))


@pytest.mark.parametrize("name", ["one-mark", "two-marks", "n-marks"])
def test_the_marked_patterns_only_append_and_move_their_marks(name: str) -> None:
    pattern = PATTERNS[name](TURNS, 1)
    wanted = {"one-mark": 1, "two-marks": 2, "n-marks": 3}[name]
    turns = history(pattern)
    for before, after in itertools.pairwise(turns):
        assert after[: len(before)] == before
        assert len(after) == len(before) + 2
    for turn in pattern.turns[wanted * 2 :]:
        users = [i for i, m in enumerate(turn.messages) if m["role"] == "user"]
        assert marked(turn.messages) == users[-wanted:]
        assert ("cache_control" in json.dumps(turn.body["system"])) == (name == "n-marks")


def test_results_as_text_never_answer_a_call_with_a_result_block() -> None:
    pattern = patterns.results_as_text(TURNS, 1)
    last = pattern.turns[-1].messages
    calls, results = calls_and_results(last)
    assert len(calls) == TURNS - 1
    assert results == []
    texts = [m["content"][0]["text"] for m in last if m["role"] == "user"][1:]
    assert all(t.startswith("[read_file for '") and "] Result:\n" in t for t in texts)
    assert len(marked(last)) == 2


def test_unanswered_leaves_a_call_open_and_sends_a_result_before_its_call() -> None:
    last = patterns.unanswered(TURNS, 1).turns[-1].messages
    calls, results = calls_and_results(last)
    assert len(set(calls) - set(results)) == 1  # the interrupted call
    order: dict[str, int] = {}
    for index, message in enumerate(last):
        for block in message["content"] if isinstance(message["content"], list) else []:
            key = block.get("id") or block.get("tool_use_id")
            if key:
                order.setdefault(f"{block['type']}:{key}", index)
    answered = [k for k in calls if f"tool_result:{k}" in order]
    early = [k for k in answered if order[f"tool_result:{k}"] < order[f"tool_use:{k}"]]
    assert len(early) == 1


def test_edited_changes_deletes_and_inserts_in_the_middle() -> None:
    turns = history(patterns.edited(TURNS, 1))
    seen = set()
    for before, after in itertools.pairwise(turns):
        if after[: len(before)] == before:
            assert len(after) == len(before) + 2
            continue
        changed = next(i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b)
        assert len(before) // 4 <= changed <= 3 * len(before) // 4 + 1  # in the middle
        grown = len(after) - len(before)
        kind = {2: "edit", 0: "deletion", 4: "insertion"}[grown]
        if kind == "edit":  # one message changed, the rest kept, two new at the end
            assert after[changed + 1 : len(before)] == before[changed + 1 :]
        elif kind == "deletion":  # a call and its result gone
            assert after[: len(before) - 2] == before[:changed] + before[changed + 2 :]
        else:  # an exchange added after a user message
            assert after[changed + 2 : len(before) + 2] == before[changed:]
        seen.add(kind)
    assert seen == {"edit", "deletion", "insertion"}


def test_compaction_replaces_the_history_by_a_summary_then_grows() -> None:
    turns = history(patterns.compaction(60, 1))
    restarts = [n for n, t in enumerate(turns) if len(t) == 1 and n > 0]
    assert restarts == [20, 45]
    for n in restarts:
        assert turns[n][0]["content"][0]["text"].startswith("This session is being continued")
        assert len(turns[n + 1]) == 3


def test_regenerate_resends_a_turn_and_rewinds_two_exchanges() -> None:
    pattern = patterns.regenerate(TURNS, 1)
    same = [n for n in range(1, TURNS) if pattern.turns[n] == pattern.turns[n - 1]]
    assert same == [3, 10, 17, 24]
    turns = history(pattern)
    rewinds = [
        n
        for n in range(1, TURNS)
        if len(turns[n]) == len(turns[n - 1]) - 2 and turns[n][:-2] == turns[n - 1][:-4]
    ]
    assert rewinds == [8, 19]


@pytest.mark.parametrize("count", [2, 5])
def test_interleaved_conversations_take_turns_and_each_grows_on_its_own(count: int) -> None:
    pattern = PATTERNS[f"interleaved-{count}"](TURNS, 1)
    assert [t.conversation for t in pattern.turns[: 2 * count]] == list(range(count)) * 2
    firsts = set()
    for conversation in range(count):
        turns = history(pattern, conversation)
        assert len(turns) == TURNS
        for before, after in itertools.pairwise(turns):
            assert after[: len(before)] == before
            assert len(after) == len(before) + 2
        firsts.add(json.dumps(turns[0][0]))
    assert len(firsts) == count  # other conversations, one agent: the same system and tools
    assert len({json.dumps(t.body["tools"]) for t in pattern.turns}) == 1


# --- the baseline ---------------------------------------------------------------------------


def test_the_baseline_head_is_the_request_line_and_headers_as_written() -> None:
    head = edits_baseline.head("/v1/messages", "api.x", [("a", "b")], 10, "dcz")
    assert head == (
        b"POST /v1/messages HTTP/1.1\r\nhost: api.x\r\ncontent-length: 10\r\n"
        b"content-encoding: dcz\r\na: b\r\n\r\n"
    )


def test_the_baseline_compresses_each_body_against_the_previous_one_of_its_conversation() -> None:
    first, second = (encode(t.body) for t in patterns.one_mark(8, 1).turns[-2:])
    frame = edits_baseline.delta(second, first)
    dictionary = zstandard.ZstdCompressionDict(first, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    assert zstandard.ZstdDecompressor(dict_data=dictionary).decompress(frame) == second
    alone = edits_baseline.delta(second, None)
    assert zstandard.ZstdDecompressor().decompress(alone) == second
    assert len(frame) * 3 < len(alone)  # the previous body is most of this one
    other = encode(patterns.one_mark(1, 9).turns[0].body)
    headers = [("x", "y")]
    sizes = edits_baseline.baseline("/p", "h", headers, [(0, first), (1, other), (0, second)])

    def wire(body: bytes, before: bytes | None) -> int:
        frame = edits_baseline.delta(body, before)
        encoding = "dcz" if before else "zstd"
        return len(edits_baseline.head("/p", "h", headers, len(frame), encoding)) + len(frame)

    # conversation 1's first body has no dictionary; conversation 0's second uses its own first
    assert sizes == [wire(first, None), wire(other, None), wire(second, first)]


def test_what_a_conversation_said_counts_each_message_once_marks_aside() -> None:
    grown = patterns.one_mark(10, 1)
    last = grown.turns[-1].body
    marks = len(json.dumps({"cache_control": patterns.MARK}, separators=(",", ":"))) - 1
    # only growing: the last body, less its one mark, its brackets and commas
    expected = len(encode(last)) - marks - len("messages") - 4 - len(last["messages"]) - 1
    assert edits_baseline.content_bytes(t.body for t in grown.turns) == expected
    compacted = patterns.compaction(30, 1)
    said = edits_baseline.content_bytes(t.body for t in compacted.turns)
    assert said > len(encode(compacted.turns[19].body)) + len(encode(compacted.turns[-1].body)) / 2
    assert said > max(len(encode(t.body)) for t in compacted.turns) * 1.2  # before the summary too


def test_a_trace_is_replayed_as_the_bodies_its_agent_sent_turn_by_turn() -> None:
    from tests.unit.test_bench import small_trace

    trace = small_trace()  # OpenAI Chat: five calls and their results
    pattern = from_trace(trace, None)
    assert pattern is not None
    assert pattern.fmt == "openai-chat"
    assert [len(t.messages) for t in pattern.turns] == [2, 4, 6, 8]  # before each model call
    sent = [on_the_wire(m, "openai-chat") for m in trace.messages[:8]]  # as a client sends
    assert pattern.turns[-1].messages == sent
    assert "max_tokens" not in pattern.turns[0].body
    limited = from_trace(trace, 2)
    assert limited is not None
    assert len(limited.turns) == 2
    chosen = conversations([trace], Plan(turns=4, patterns=("one-mark", "interleaved-2")))
    assert [(kind, p.name, len(p.turns)) for kind, p in chosen] == [
        ("trace", "synthetic", 4),
        ("pattern", "one-mark", 4),
        ("pattern", "interleaved-2", 8),
    ]


# --- the hop ---------------------------------------------------------------------------------


@asynccontextmanager
async def serving(handler: Any) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_the_hop_counts_the_bytes_written_and_alternates_between_its_gateways() -> None:
    async with serving(fast_upstream.handle) as one, serving(fast_upstream.handle) as two:
        hop = CountingHop([one, two])
        async with serving(hop.handle) as url:
            client = Connection.to(url)
            body = b'{"stream":false,"messages":[]}'
            raw = request(url + "/llm/x/v1/messages", body, {"content-type": "application/json"})
            hop.turn = 7
            answer = await client.send(raw)
            reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":")[-1]))
            chunked = (
                b"POST /llm/x/v1/messages HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked"
                b"\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
            )
            writer.write(chunked)
            await reader.readuntil(b"\r\n\r\n")
            writer.close()
            await client.close()
            await asyncio.sleep(0.05)
        await hop.close()
    assert answer.status == 200
    assert json.loads(answer.body)["type"] == "message"
    first, second = hop.sent
    assert (first.turn, first.wire, first.gateway, first.media) == (
        7,
        len(raw),
        0,
        "application/json",
    )
    assert (second.wire, second.gateway, second.llm) == (len(chunked), 1, True)


async def test_requests_outside_a_turn_leave_the_rotation_where_it_was() -> None:
    """Found: the bench's control request after each turn took every other slot, so all of
    a conversation's turns went to one of two gateways."""
    async with serving(fast_upstream.handle) as one, serving(fast_upstream.handle) as two:
        hop = CountingHop([one, two])
        async with serving(hop.handle) as url:
            client = Connection.to(url)
            for turn in range(4):
                for hop.turn in (turn, -1):  # a turn, then a control request
                    await client.send(request(url + "/llm/x/v1/messages", b"{}"))
            await client.close()
        await hop.close()
    assert [s.gateway for s in hop.sent if s.turn >= 0] == [0, 1, 0, 1]


# --- the report ------------------------------------------------------------------------------


def sent(turn: int, status: int = 200, problem: str = "", media: str = "x") -> Sent:
    return Sent(turn, "POST", "/llm/bench/v1/messages", media, 100, status, problem, 0)


def test_a_conversation_is_judged_against_each_target() -> None:
    requests = [sent(0), sent(1, 400, "dictionary-mismatch"), sent(1), sent(2)]
    cpu = [0.002] * 20 + [0.003] * 20  # grows by 1.5x: over 1.3x
    slower = [0.001] * 20 + [0.0011] * 20  # the machine ran 10% slower at the end
    keys = {"h": (2, 40)}
    measured = Measured(
        "p", "pattern", "anthropic", 3, 900, 500, requests, cpu, slower, cpu, 40, keys, 100, [3]
    )
    assert measured.extra == 1
    assert measured.problems == {"400 dictionary-mismatch": 1}
    assert measured.path == "history refs"
    assert edits_report.growth(cpu) == pytest.approx((0.003, 0.002, 20))
    assert edits_report.growth([1.0, 2.0, 4.0]) == (4.0, 1.0, 1)  # fewer than 40: halves
    client = [sent(0, media="application/vnd.toolref.edit", status=200)] * 4  # 400 bytes
    backend = Measured(
        "p", "pattern", "anthropic", 4, 900, 500, client, cpu, cpu, cpu, 60, keys, 100, [],
        [0.002, 0.004, 0.003],
    )  # fmt: skip
    long = Measured(
        "q", "long", "anthropic", 1, 9, 5, client[:1], cpu, cpu, cpu, 60, keys, 100, [], [0.0035]
    )
    [conversations, chat, replicas] = edits_report.sections(
        [measured], [backend, long], [("w", measured)], Plan(), "code", traces="none"
    )
    row = conversations.rows[0]
    assert row[4] == "133"  # socket bytes per turn: 400 over 3 turns
    assert row[6] == "1.25"  # a baseline of 500 over 400 bytes (a pattern: judged on the median)
    assert row[8:11] == ["1.50", "1.10", "1.36 FAIL"]  # 1.5x at 1.1x slower: 1.36x
    assert row[12] == "40 (h 2: 0.0 KB)"
    assert row[13] == "0.40 PASS"
    assert replicas.rows[0][4] == "1"
    assert replicas.rows[0][-1] == "FAIL"
    assert conversations.verdicts[0].startswith("FAIL")  # 1.25, under 1.3 (no trace: all)
    assert conversations.verdicts[1].startswith(
        "FAIL: the baseline's bytes over the relay's, median"
    )
    assert conversations.verdicts[2].startswith("FAIL")  # CPU
    # the chat-backend path: its bytes over the relay's for the same conversation
    assert chat.rows[0][3:6] == ["0.4 KB", "0.4 KB", "1.00 PASS"]
    assert chat.rows[0][9] == "1.00 PASS"  # its control grew as much: no growth
    assert chat.rows[0][12:14] == ["0.60 FAIL", "3.00"]  # Redis; the middleware's median ms
    assert chat.rows[1][4] == "(not relayed)"
    assert chat.verdicts[-1].startswith("FAIL: the middleware adds 3.50 ms per request")
    edit = sent(0, media="application/vnd.toolref.edit")
    assert Measured("e", "pattern", "anthropic", 1, 1, 1, [edit], [], [], []).path == "edits"


def test_a_section_is_replaced_in_place_or_added_before_the_regions(tmp_path: Any) -> None:
    doc = tmp_path / "b.md"
    doc.write_text("# B\n\n## One\n\nold\n\n## Two\n\nkept\n<!-- soak -->\n<!-- /soak -->\n")
    replace_section(doc, Section("One", "new", ["a"], [["1"]]))
    replace_section(doc, Section("Three", "added", ["a"], [["2"]]))
    text = doc.read_text()
    assert "old" not in text
    assert text.index("new") < text.index("## Two")
    assert text.index("kept") < text.index("## Three") < text.index("<!-- soak -->")


def test_what_the_bench_leaves_out_of_a_conversations_keys_is_per_tenant_counters() -> None:
    """The edits bench measures the keys a conversation added, per tenant counters left
    out: one that crossed a minute added that minute's usage hash, which was counted as the
    conversation's (tau-bench's figure moved across 0.5 by it)."""
    tenant = "t"
    counters = [keys.usage(tenant, 1), keys.stored_bytes(tenant, 1), keys.model_calls(tenant, 1)]
    assert {key.split(":")[2] for key in counters} <= COUNTERS
    own = [keys.recipe_node(tenant, "tb_abc"), keys.answer(tenant, "tb_abc")]
    own += [keys.edit_piece(tenant, b"\x01" * 16), keys.recipe_chunk(tenant, b"\x02" * 16)]
    assert not {key.split(":")[2] for key in own} & COUNTERS
