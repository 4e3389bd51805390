"""The relay's pure parts: headers, error shapes, bodies, savings, switching, 413 items."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
from typing import Any

import httpx
import pytest
import zstandard
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from toolref.asgi.hops import end_to_end
from toolref.asgi.scope import Disconnected, Message, read_body
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire.errors import BodyTooLargeError, DecompressedTooLargeError, MalformedBodyError
from toolref_relay import (
    RelayConfig,
    Switchboard,
    Totals,
    Upload,
    Who,
    conversation_of,
    error_reply,
    provider_of,
    savings_header,
    size,
    summary,
    turn_line,
    who,
)
from toolref_relay.bodies import TOO_LARGE, inflated, readable
from toolref_relay.calls import Call
from toolref_relay.capabilities import Capabilities
from toolref_relay.headers import to_agent, to_gateway, to_provider
from toolref_relay.ledger import MAX_TOTALS, OTHERS, shrunk
from toolref_relay.llm import recognise

AGENT = [
    ("Host", "127.0.0.1:8760"),
    ("Connection", "keep-alive, X-Hop"),
    ("X-Hop", "1"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Authorization", "Basic abc"),
    ("TE", "trailers"),
    ("x-api-key", "sk-ant"),
    ("Authorization", "Bearer sk"),
    ("Content-Type", "application/json"),
    ("Content-Length", "120"),
    ("Content-Encoding", "zstd"),
    ("Toolref-Key", "made up by the agent"),
]


def names(pairs: Any) -> list[str]:
    return [(k.decode() if isinstance(k, bytes) else k).lower() for k, _ in pairs]


def test_hop_by_hop_headers_stay_behind() -> None:
    assert names(end_to_end(AGENT)) == [
        "x-api-key",
        "authorization",
        "content-type",
        "content-length",
        "content-encoding",
        "toolref-key",
    ]


def test_the_gateway_gets_credentials_and_the_relay_s_key_and_body_headers_when_changed() -> None:
    sent = to_gateway(AGENT, key="k", switched_from="a", body_changed=True)
    assert sent == [
        ("x-api-key", "sk-ant"),
        ("Authorization", "Bearer sk"),
        ("Content-Type", "application/json"),
        ("Toolref-Key", "k"),
        ("Toolref-Switched-From", "a"),
    ]
    kept = to_gateway(AGENT, key=None, switched_from=None, body_changed=False)
    assert "content-length" in names(kept)
    assert "toolref-key" not in names(kept)


def test_the_provider_gets_the_agent_s_request_without_toolref() -> None:
    assert names(to_provider(AGENT)) == [
        "x-api-key",
        "authorization",
        "content-type",
        "content-length",
        "content-encoding",
    ]


def test_the_agent_gets_the_answer_without_toolref_headers() -> None:
    answer = [
        ("content-type", "text/event-stream"),
        ("Toolref-Protocol", "2"),
        ("Toolref-History", "th_x"),
        ("Toolref-References", "{}"),
        ("transfer-encoding", "chunked"),
        ("content-encoding", "gzip"),
        ("request-id", "req_1"),
    ]
    assert to_agent(answer, extra=[("Toolref-Savings", "raw=1, wire=1, ratio=1.0")]) == [
        (b"content-type", b"text/event-stream"),
        (b"content-encoding", b"gzip"),
        (b"request-id", b"req_1"),
        (b"toolref-savings", b"raw=1, wire=1, ratio=1.0"),
    ]
    assert "content-encoding" not in names(to_agent(answer, body_changed=True))


def test_the_provider_is_told_by_path_or_header() -> None:
    assert provider_of("/v1/messages", []) == "anthropic"
    assert provider_of("/v1/messages/count_tokens", []) == "anthropic"
    assert provider_of("/v1/models", [("anthropic-version", "2023-06-01")]) == "anthropic"
    assert provider_of("/v1/chat/completions", []) == "openai"
    assert provider_of("/v1/responses", []) == "openai"


def test_errors_take_the_provider_s_shape() -> None:
    anthropic = error_reply("anthropic", 502, "down", "toolref_gateway_unreachable")
    assert anthropic.status == 502
    assert json.loads(anthropic.body) == {
        "type": "error",
        "error": {"type": "api_error", "message": "down"},
    }
    big = json.loads(error_reply("anthropic", 413, "big", "c").body)
    assert big["error"]["type"] == "request_too_large"
    openai = error_reply("openai", 502, "down", "toolref_gateway_unreachable")
    assert json.loads(openai.body) == {
        "error": {
            "message": "down",
            "type": "server_error",
            "param": None,
            "code": "toolref_gateway_unreachable",
        }
    }
    assert json.loads(error_reply("openai", 413, "big", "c").body)["error"]["type"] == (
        "invalid_request_error"
    )


@pytest.mark.parametrize(
    ("status", "anthropic", "openai"),
    [
        (401, "authentication_error", "invalid_request_error"),
        (404, "not_found_error", "invalid_request_error"),
        (422, "invalid_request_error", "invalid_request_error"),
        (429, "rate_limit_error", "rate_limit_error"),
        (431, "invalid_request_error", "invalid_request_error"),
        (503, "overloaded_error", "server_error"),
        (504, "timeout_error", "server_error"),
    ],
)
def test_each_status_a_gateway_refuses_with_has_the_provider_s_type(
    status: int, anthropic: str, openai: str
) -> None:
    """The statuses `toolref.Transport` hands an SDK as they came (the relay turns most 4xx
    into 400): a client error is never typed as the provider's failure."""
    said = json.loads(error_reply("anthropic", status, "m", "c").body)
    assert said == {"type": "error", "error": {"type": anthropic, "message": "m"}}
    assert json.loads(error_reply("openai", status, "m", "c").body)["error"]["type"] == openai


def _receiver(*messages: Message) -> Any:
    queue = list(messages)

    async def receive() -> Message:
        return queue.pop(0)

    return receive


def test_bodies_are_read_within_the_wire_limit() -> None:
    chunks = (
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    )
    assert asyncio.run(read_body(_receiver(*chunks), 4, TOO_LARGE)) == b"abcd"
    with pytest.raises(BodyTooLargeError, match="--max-body-bytes"):
        asyncio.run(read_body(_receiver(*chunks), 3, TOO_LARGE))
    with pytest.raises(Disconnected):
        asyncio.run(read_body(_receiver({"type": "http.disconnect"}), 3, TOO_LARGE))


def test_bodies_are_inflated_within_the_size_limit() -> None:
    body = b'{"messages": []}' * 100
    assert inflated(gzip.compress(body), "gzip", len(body)) == body
    assert inflated(zstandard.compress(body), " ZSTD ", len(body)) == body
    assert inflated(body, None, 1) == body  # as sent: the wire limit applies
    with pytest.raises(DecompressedTooLargeError):
        inflated(zstandard.compress(body), "zstd", len(body) - 1)
    with pytest.raises(DecompressedTooLargeError):
        inflated(gzip.compress(body), "gzip", len(body) - 1)
    with pytest.raises(MalformedBodyError):
        inflated(b"not gzip", "gzip", 100)
    assert readable("identity")
    assert readable("gzip")
    assert not readable("br")


def test_sizes_read_in_binary_units() -> None:
    """One convention everywhere (the relay printed KB of 1000, the demo KiB of 1024)."""
    assert size(999) == "999 B"
    assert size(1023) == "1023 B"
    assert size(1024) == "1.0 KiB"
    assert size(88_100) == "86.0 KiB"
    assert size(2_300) == "2.2 KiB"
    assert size(1_048_575) == "1.0 MiB"  # not "1024.0 KiB"
    assert size(56_000_000_000) == "52.2 GiB"


def test_the_agent_is_named_by_its_user_agent_product_alone() -> None:
    agent = [("User-Agent", "claude-cli/2.1.330 (external, cli)")]
    assert who(agent, "anthropic") == Who("claude-cli", "anthropic")
    assert str(who(agent, "anthropic")) == "claude-cli -> anthropic"
    assert who([], "openai").agent == "an agent without a User-Agent"
    assert who([("user-agent", "a b c; secret=1")], "x").agent == "an agent without a User-Agent"


CLAUDE = Who("claude-cli", "anthropic")


def test_each_turn_and_its_agents_totals_are_told() -> None:
    totals = Totals()
    first = Upload(raw=88_100, inflated=88_100, wire=2_300)
    assert savings_header(first) == "raw=88100, wire=2300, ratio=38.3"
    number, tally = totals.add(CLAUDE, first)
    assert turn_line(CLAUDE, number, first, tally) == (
        "toolref relay: claude-cli -> anthropic turn 1  200  agent sent 86.0 KiB  sent 2.2 KiB  "
        "38.3x  (its conversations so far: agent sent 86.0 KiB, sent 2.2 KiB, 38.3x over 1 "
        "answered turn)"
    )
    fallback = Upload(raw=1000, inflated=4000, wire=900, route="fallback")
    number, _ = totals.add(CLAUDE, fallback)
    line = turn_line(CLAUDE, number, fallback, tally)
    assert "turn 2" in line
    assert "fallback: gateway unreachable" in line
    refused = Upload(raw=10, inflated=0, wire=0, route="refused", status=413)
    number, _ = totals.add(CLAUDE, refused)
    assert "turn 3  413  agent sent 10 B  refused by the relay, not counted" in turn_line(
        CLAUDE, number, refused, tally
    )
    failed = Upload(raw=500, inflated=500, wire=50, status=404)  # the gateway's or provider's
    number, _ = totals.add(CLAUDE, failed)
    line = turn_line(CLAUDE, number, failed, tally)
    assert line.startswith(
        "toolref relay: claude-cli -> anthropic turn 4  404  agent sent 500 B  sent 50 B  failed"
    )
    assert summary(CLAUDE, tally) == (
        "toolref relay: claude-cli -> anthropic, every conversation since the relay started: "
        "agent sent 87.0 KiB, sent 3.1 KiB, 27.8x over 2 answered turns, 2 failed (agent "
        "bodies inflated: 89.9 KiB); 1 went to the fallback, 1 refused"
    )


def test_totals_are_kept_per_agent_and_upstream_and_bounded() -> None:
    """Found trying the product: one session line mixed every agent and conversation."""
    totals = Totals()
    qwen = Who("QwenCode", "openai")
    totals.add(CLAUDE, Upload(raw=90_000, inflated=90_000, wire=3_000))
    number, tally = totals.add(qwen, Upload(raw=10_000, inflated=10_000, wire=5_000))
    assert number == 1  # its own first turn
    assert (tally.raw, tally.wire) == (10_000, 5_000)
    assert totals.each[CLAUDE].raw == 90_000
    assert (totals.all.turns, totals.all.raw, totals.all.wire) == (2, 100_000, 8_000)
    for n in range(MAX_TOTALS):  # names any local process may make up
        totals.add(Who(f"made-up-{n}", "x"), Upload(raw=1, inflated=1, wire=1))
    assert len(totals.each) == MAX_TOTALS + 1  # the rest counted as others
    assert totals.each[Who(OTHERS, OTHERS)].turns == 2


def test_a_request_the_relay_could_not_shrink_shows_no_ratio() -> None:
    """Found trying the product: `72 B -> 293 B 0.2x` for a tiny request."""
    totals = Totals()
    tiny = Upload(raw=297, inflated=72, wire=340)  # as it came, and the key's header line
    number, tally = totals.add(CLAUDE, tiny)
    line = turn_line(CLAUDE, number, tiny, tally)
    assert "agent sent 297 B  sent 340 B  not shrunk  (" in line
    assert "not shrunk over 1 answered turn" in line
    assert "x" not in line.split("sent 340 B")[1].split("(")[0]  # no ratio shown
    assert shrunk(297, 297) == "not shrunk"
    assert shrunk(300, 100) == "3.0x"
    assert shrunk(0, 0) == "nothing sent"


def test_the_switchboard_routes_selects_and_names_the_upstream_left() -> None:
    board = Switchboard(("a", "b", "c"))
    assert board.route("a") == "a"
    assert board.route("other") == "other"  # not switched: a name the relay does not switch
    assert board.moved("conv", "a", 1) is None
    assert board.select("b") == "a"
    assert board.route("a") == "b"
    assert board.moved("conv", "b", 3) == "a; at=2"
    # Told on every later request too: the gateway rewrites each the same way.
    assert board.moved("conv", "b", 5) == "a; at=2"
    assert board.moved("conv", "a", 7) == "b; at=6"  # and back
    assert board.cycle() == "c"
    assert board.cycle() == "a"
    with pytest.raises(ValueError, match="a, b, c"):
        board.select("d")
    with pytest.raises(ValueError, match="--switch"):
        Switchboard().cycle()
    assert Switchboard().moved("conv", "a", 1) is None


def test_a_conversation_is_known_by_its_opening() -> None:
    first = {"system": "s", "messages": [{"role": "user", "content": "hi"}]}
    later = {**first, "messages": [*first["messages"], {"role": "assistant", "content": "yo"}]}
    other = {**first, "system": "t"}
    assert conversation_of(first, "messages") == conversation_of(later, "messages")
    assert conversation_of(first, "messages") != conversation_of(other, "messages")
    assert conversation_of({"messages": []}, "messages") is None


def _request(result_sizes: list[int]) -> Any:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for n, length in enumerate(result_sizes):
        call = f"toolu_{n}"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": call, "name": "Read", "input": {"n": n}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call, "content": "x" * length}],
            }
        )
    body = json.dumps({"model": "m", "messages": messages}).encode()
    return recognise("POST", "/v1/messages", {"content-type": "application/json"}, body)


def test_options_that_cannot_work_are_refused_with_the_fix() -> None:
    assert RelayConfig("http://g:1/").gateway == "http://g:1"
    with pytest.raises(ValueError, match="--gateway"):
        RelayConfig("g:1")
    with pytest.raises(ValueError, match="--fallback"):
        RelayConfig("http://g", fallback="api.anthropic.com")
    with pytest.raises(ValueError, match="twice"):
        RelayConfig("http://g", switch=("a", "a"))
    with pytest.raises(ValueError, match="--max-body-bytes"):
        RelayConfig("http://g", max_body_bytes=0)
    assert "secret" not in repr(RelayConfig("http://g", key="secret"))


@pytest.mark.parametrize(
    ("status", "document", "takes"),
    [
        (200, {"edits": 1}, True),  # a gateway before size-guarded edits: version 1
        (200, {"edits": True}, False),  # a boolean is not a version
        (200, {"edits": 2}, True),
        (200, {"edits": 3}, True),  # a newer gateway reads what this relay writes too
        (200, {"edits": 0}, False),
        (200, {"historyRefs": True}, False),  # a gateway from before edits
        (404, {"edits": 1}, False),
        (200, "not a document", False),
    ],
)
def test_edits_are_sent_only_when_the_gateway_says_it_reads_them(
    status: int, document: Any, takes: bool
) -> None:
    """Asked once per start: the answer is kept, and a 415 turns edits off."""
    asked: list[int] = []

    async def ask() -> httpx.Response:
        asked.append(1)
        body = json.dumps(document).encode() if isinstance(document, dict) else b"{not json"
        return httpx.Response(status, content=body)

    async def run() -> tuple[bool, bool, int]:
        found = Capabilities()
        return await found.edits(ask), await found.edits(ask), found.version

    first, again, version = asyncio.run(run())
    assert (first, again) == (takes, takes)
    if takes:  # the highest version both read
        assert version == min(document["edits"], EDITS_VERSION)
    assert len(asked) == 1
    refused = Capabilities()
    refused.refused()
    assert asyncio.run(refused.edits(ask)) is False
    assert asyncio.run(Capabilities(enabled=False).edits(ask)) is False
    assert len(asked) == 1


@pytest.mark.parametrize("first", ["unreachable", 503, 429])
def test_a_gateway_that_cannot_be_reached_or_is_rolling_is_asked_again(first: Any) -> None:
    """Unreachable, or answering 5xx or 429 (a gateway rolling, an ingress in between):
    asked again at the next turn, not taken for one without edits for the whole start."""
    calls: list[int] = []

    async def ask() -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            if first == "unreachable":
                raise httpx.ConnectError("down")
            return httpx.Response(first, text="try again")
        return httpx.Response(200, json={"edits": 1})

    async def run() -> tuple[bool, bool]:
        found = Capabilities()
        return await found.edits(ask), await found.edits(ask)

    assert asyncio.run(run()) == (False, True)


def test_a_body_nested_past_the_parser_is_no_llm_request_to_read() -> None:
    """Valid JSON nested past the parser's depth (a switched turn reads its body): passed
    on as it came, never a 500."""
    deep = b"[" * 100_000 + b"]" * 100_000
    body = b'{"model":"m","messages":[{"role":"user","content":' + deep + b"}]}"
    assert recognise("POST", "/v1/messages", {"content-type": "application/json"}, body) is None


def test_a_turn_cancelled_while_the_editor_works_holds_its_lock_until_the_work_ends() -> None:
    """The agent hangs up while its body is cut in a worker thread: the turn's cancellation
    waits for the cut to end, so the client's lock (and its editor, not thread-safe) is
    never used by the next turn while the thread still works on it."""
    from toolref_relay.as_edit import _to_its_end

    async def run() -> list[str]:
        events: list[str] = []
        release = asyncio.Event()
        lock = asyncio.Lock()

        async def cut() -> str:
            await release.wait()
            events.append("cut ended")
            return "edit"

        async def turn() -> None:
            async with lock:
                await _to_its_end(cut())
            events.append("unreachable")

        task = asyncio.create_task(turn())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        assert lock.locked()  # still held: the cut goes on
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        events.append(f"lock free: {not lock.locked()}")
        return events

    assert asyncio.run(run()) == ["cut ended", "lock free: True"]


def test_a_gateway_refusal_in_the_agents_shape_keeps_its_retry_after() -> None:
    """A 429 of the gateway's (a quota), rewritten into the provider's error shape for the
    agent: its `Retry-After` goes with it, so the agent waits as the gateway asked."""
    from toolref_relay.calls import Call
    from toolref_relay.problems import as_provider_error

    problem = {"type": "urn:toolref:problem:quota-exceeded", "title": "t", "detail": "wait"}
    answer = httpx.Response(
        429,
        headers={"content-type": "application/problem+json", "retry-after": "7"},
        content=json.dumps(problem).encode(),
    )
    call = Call("POST", "anthropic", "/v1/messages", "", [], "anthropic")
    reply = asyncio.run(as_provider_error(answer, call, "http://gateway"))
    assert reply is not None
    assert reply.status == 429
    assert ("retry-after", "7") in reply.headers


_SAFE = "ABCXYZabcxyz0189-._~!$&'()*+,;=:@/"


@settings(max_examples=300, deadline=None)
@given(
    path=st.text(alphabet=_SAFE + '"{}#%^|` ', max_size=30),
    query=st.text(alphabet=_SAFE + '?"{}#%^|` ', max_size=30),
)
def test_a_target_sent_without_the_extension_is_the_agents_bytes(path: str, query: str) -> None:
    """`Call.exact` answers a path and query of RFC 3986's unreserved and sub-delims (and
    `:@/?`) without parsing a URL (every usual turn: a per-turn cost of the relay); where
    it gives no extension, httpx sends the agent's bytes as they are, whatever they hold."""
    call = Call("POST", "bench", "/v1/" + path, query, [], "openai")
    assume("/." not in call.suffix())  # a dot segment: refused before (`guard.path_refusal`)
    url = "http://127.0.0.1:9/llm/bench" + call.suffix()
    sent = ("/llm/bench" + call.suffix()).encode("latin-1")
    exact = call.exact(url)
    assert (exact or {"target": httpx.URL(url).raw_path}) == {"target": sent}
    if all(c in _SAFE + "?" for c in call.suffix()):
        assert exact == {}  # answered without a URL parsed


def test_the_relay_is_served_on_h11_whatever_parsers_are_installed() -> None:
    """uvicorn's default (`http="auto"`) picks httptools where it is installed, whose
    protocol forwards a chunked body's trailers as headers, drops a `gzip` transfer coding
    and loses an `Upgrade: h2c` request's body: the relay names h11 (as `GetUpgrades`, a
    WebSocket upgrade only for a GET; the service's `Connection` builds on it too)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from toolref.asgi.upgrade import GetUpgrades
    from toolref_relay.cli import server_config
    from toolref_server.http.connection import Connection

    async def app(scope: object, receive: object, send: object) -> None:
        return None

    # uvicorn.Config sets its loggers' levels: put them back (tests/unit/test_logs.py reads
    # uvicorn.error's INFO lines in the same worker)
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    levels = [logger.level for logger in loggers]
    try:
        config = server_config(app, "asyncio", "warning", 1024)
        config.load()
        assert config.http_protocol_class is GetUpgrades
        assert issubclass(GetUpgrades, H11Protocol)
        assert issubclass(Connection, GetUpgrades)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def test_an_answer_whose_head_the_agent_never_took_is_closed() -> None:
    """Found in review: the head went to the agent before the block that closes the
    answer, so a send cancelled there (the agent gone, uvicorn's write paused) left the
    gateway's answer open (a channel stream, a pooled connection held)."""
    from toolref_relay.replies import relay_answer

    closed: list[bool] = []

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b"data: {}\n\n"

        async def aclose(self) -> None:
            closed.append(True)

    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Stream())

    async def send(message: Any) -> None:
        raise asyncio.CancelledError  # the head's send cancelled

    with pytest.raises(asyncio.CancelledError):
        await relay_answer(send, response)
    assert closed == [True]


def test_a_gateway_that_refused_an_edit_is_asked_again_later() -> None:
    """A 415 turned edits off for the whole start (a gateway rolled back, then forward
    again, got every turn as it came until the relay restarted); now its capabilities are
    asked again `RECENT` seconds later, and edits resume when they say so."""
    from toolref.sending.said import RECENT

    asked: list[int] = []

    async def ask() -> httpx.Response:
        asked.append(1)
        return httpx.Response(200, content=json.dumps({"edits": 4}).encode())

    now = [50.0]
    found = Capabilities()
    found.clock = lambda: now[0]
    found.refused()
    assert asyncio.run(found.edits(ask)) is False
    now[0] += RECENT - 1
    assert asyncio.run(found.edits(ask)) is False
    assert asked == []
    now[0] += 1
    assert asyncio.run(found.edits(ask)) is True
    assert (asked, found.version) == ([1], 4)


@pytest.mark.parametrize(
    "again", [(404, b"not found"), (401, b"{}"), (200, b"<html>a proxy's page</html>")]
)
def test_a_relearnt_version_answered_by_no_document_is_asked_again_later(
    again: tuple[int, bytes],
) -> None:
    """An edit refused 400 `malformed-body` has the capabilities asked again; a proxy
    before the gateway that answered that question 404, 401 or a page of its own (found in
    review) turned edits off for the rest of the relay's run, though the gateway took
    edits before and after. Now an answer that says no edits is asked again `RECENT`
    seconds later, as after a 415."""
    from toolref.sending.said import RECENT

    answers = [(200, json.dumps({"edits": 6}).encode()), again]

    async def ask() -> httpx.Response:
        status, body = answers.pop(0) if answers else (200, json.dumps({"edits": 6}).encode())
        return httpx.Response(status, content=body)

    now = [50.0]
    found = Capabilities()
    found.clock = lambda: now[0]
    assert asyncio.run(found.edits(ask)) is True
    assert found.unreadable(6)
    assert asyncio.run(found.edits(ask)) is False  # the proxy's answer
    now[0] += RECENT - 1
    assert asyncio.run(found.edits(ask)) is False
    now[0] += 1
    assert asyncio.run(found.edits(ask)) is True
