"""A fuzz of the gateway over real sockets: request lines, paths (raw and decoded), methods,
headers (`Toolref-*`, framing, `Host`) and bodies that hypothesis makes up, sent to the
service (the HTTP layer of `toolref-server serve`, the test engine) in front of a strict
upstream (`gateway_wire.StrictUpstream`, which answers everything it can parse 200).

Each example asserts: an answer comes, never a 5xx (the upstream is up and answers at once,
so no 502/504 is due); an answer of the gateway's own (not the upstream's) that refuses is
problem+json and left the engine's keyspace as it was; what reached the upstream is valid
HTTP/1.1 and stays under the upstream's base path.

How long: `TOOLREF_FUZZ_EXAMPLES` examples per key mode (default 40, what `make test` runs),
or, with `TOOLREF_FUZZ_SECONDS` set, that many seconds in all (half per key mode), in
rounds of 500 examples; `pytest -s` prints the count and the statuses seen.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import httpx
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from toolref.edits.edit import Inline
from toolref.edits.request import cut
from toolref.edits.wire import MEDIA_TYPE, encode

from ..conftest import all_keys, snapshot
from .gateway_wire import Reply, StrictUpstream, gateway, opened

pytestmark = pytest.mark.engine

EXAMPLES = int(os.environ.get("TOOLREF_FUZZ_EXAMPLES", "40"))
SECONDS = float(os.environ.get("TOOLREF_FUZZ_SECONDS", "0"))
ROUND = 500  # examples per hypothesis run when running for SECONDS
KEY_A, KEY_B = "fuzz-a-key", "fuzz-b-key"
KEYS = ",".join(
    f"{t}={hashlib.sha256(k.encode()).hexdigest()}" for t, k in (("a", KEY_A), ("b", KEY_B))
)
PROBLEM = "application/problem+json"
T = TypeVar("T")

# --- what a request is made of ----------------------------------------------------------

VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
SEGMENTS = st.one_of(
    st.sampled_from(
        [
            *("v1", "messages", "chat", "completions", "responses", "count_tokens", "models"),
            *("", ".", "..", "%2e", "%2E%2e", "..%2f", "%2F", "%5c", "\\", "..;", "a;b", "%00"),
            *("%0d%0a", "%09", "%7f", "%20", "%zz", "%", "%2", "caf%C3%A9", "%25", "%3F", "%23"),
            *("~", "@", ":", "+", "é", " ", "\x00", "\t"),
        ]
    ),
    st.text(VISIBLE.filter(lambda c: c not in "/?#"), max_size=6),
)
NAMES = st.sampled_from(["up", "other", "nope", "", "%75p", "..", "UP", "up%2f.."])
QUERIES = st.one_of(st.just(""), st.text(VISIBLE.filter(lambda c: c != "#"), max_size=12))
METHODS = st.sampled_from(["POST"] * 6 + ["GET", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
METHODS_ODD = st.sampled_from(["FOO", "post", "CONNECT", "TRACE"])
ENDPOINT_PATHS = st.sampled_from(
    [
        *("v1/messages", "v1/chat/completions", "v1/responses", "v1/messages/count_tokens"),
        *("v1/models", "api/v1/messages"),
    ]
)
REF = st.from_regex(r"tr_[a-z2-7]{26}", fullmatch=True)

HEADERS = st.one_of(
    st.tuples(st.just("Toolref-Key"), st.sampled_from([KEY_A, KEY_B, "garbage", "", "k" * 300])),
    st.tuples(
        st.just("Toolref-Protocol"), st.sampled_from(["2", "2", "1", "3", "two", "9" * 50, ""])
    ),
    st.tuples(
        st.just("Toolref-History"),
        st.sampled_from(["?1", "th_" + "a" * 26, "th_x", "garbage", ""]),
    ),
    st.tuples(
        st.just("Toolref-Switched-From"),
        st.one_of(
            st.sampled_from(["up", "up; at=1", "up; at=0", "x;at=99999999", "; at=", "a; at=-1"]),
            st.builds(lambda n: "up; at=" + "9" * n, st.integers(1, 5000)),
            st.text(VISIBLE, max_size=20),
        ),
    ),
    # Headers of the history refs, retired in 0.3: refused as such (400).
    st.tuples(st.just("Toolref-Dictionary"), st.sampled_from(["?1", "?0", "x"])),
    st.tuples(st.just("Toolref-Checkpoint"), st.sampled_from(["?1", "x", ""])),
    st.tuples(st.just("Toolref-Edits"), st.sampled_from(["2", "1", "9", "x", ""])),
    st.tuples(
        st.just("Content-Encoding"), st.sampled_from(["gzip", "zstd", "br", "identity", "x"])
    ),
    st.tuples(
        st.just("Content-Type"),
        st.sampled_from(["application/json", "text/plain", "application/x-msgpack", MEDIA_TYPE]),
    ),
    st.tuples(st.just("Connection"), st.sampled_from(["close", "keep-alive", "Upgrade", "x-a"])),
    st.tuples(st.just("Upgrade"), st.just("websocket")),
    st.tuples(st.just("Expect"), st.just("100-continue")),
    st.tuples(st.just("Cookie"), st.just("a=1")),
    st.tuples(
        st.text(st.sampled_from("abcXY-"), min_size=1, max_size=8).map("X-".__add__),
        st.text(VISIBLE, max_size=12),
    ),
)


def documents(refs: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Request bodies: Anthropic-like messages with tool calls, results and ref markers
    (`refs`), and shapes no format has."""
    ids = st.sampled_from(["call_1", "fn.read:0", "", "x" * 40])
    block = st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}),
        st.fixed_dictionaries(
            {"type": st.just("tool_use"), "id": ids, "name": st.just("Read"), "toolRef": refs}
        ),
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "tool_use_id": ids, "toolRef": refs}
        ),
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "tool_use_id": ids, "content": st.text(max_size=9)}
        ),
        st.fixed_dictionaries({"type": st.sampled_from(["thinking", 7, None, ["x"], {"a": 1}])}),
    )
    message = st.one_of(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant", "user", "tool", "system", 3]),
                "content": st.one_of(st.text(max_size=30), st.lists(block, max_size=3)),
            }
        ),
        st.just([1, 2]),
        st.just("text"),
    )
    odd = st.fixed_dictionaries(
        {"model": st.just("m")},
        optional={
            "messages": st.lists(message, max_size=4),
            "input": st.one_of(st.text(max_size=10), st.lists(message, max_size=4)),
            "stream": st.booleans(),
        },
    )
    return st.one_of(conversations(refs), odd)


@st.composite
def conversations(draw: st.DrawFn, refs: st.SearchStrategy[str]) -> dict[str, Any]:
    """A well-formed Anthropic conversation: a question, tool calls and their results as
    ref markers (or in full), and a last question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(st.text(max_size=20))}]
    for n in range(draw(st.integers(0, 3))):
        call: dict[str, Any] = {"type": "tool_use", "id": f"call_{n}", "name": "Read"}
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"call_{n}"}
        if draw(st.booleans()):
            call["toolRef"] = result["toolRef"] = draw(refs)
        else:
            call["input"] = {"file_path": f"/src/{n}.py"}
            result["content"] = draw(st.text(max_size=40))
        messages += [
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
    messages.append({"role": "user", "content": draw(st.text(max_size=20))})
    return {"model": "m", "max_tokens": 8, "messages": messages}


TB = st.one_of(st.from_regex(r"tb_[a-z2-7]{25}[aeimquy4]", fullmatch=True), st.just("tb_x"))
OPS = st.one_of(
    st.integers(-2, 40),
    st.sampled_from([0, 10**12, 2**63]),
    st.lists(st.integers(-2, 10**6), min_size=0, max_size=3),
    st.from_regex(r"tp_[a-z2-7]{25}[aeimquy4]", fullmatch=True),
    st.sampled_from(["tp_x", None, {"a": 1}, 1.5, True]),
)


@st.composite
def edits(draw: st.DrawFn, document: bytes) -> bytes:
    """Edit bodies (`application/vnd.toolref.edit`): the document's own recipe (well
    formed: no base, every segment inline, plain zstd or as it is), or a header line of
    made-up ops (ranges outside any base, refs no one holds, lengths that do not add up,
    nesting past the parser's, no ops) before made-up inline bytes."""
    if draw(st.booleans()):
        made = cut([("x-fuzz", "1")], document, "messages")
        if made is not None:
            words = b"" if draw(st.booleans()) else None
            return encode(None, [Inline(s) for s in made.segments], words)
    header: dict[str, Any] = {"v": draw(st.sampled_from([1, 1, 2, "1", None]))}
    header["b"] = draw(st.one_of(st.none(), TB))
    ops = draw(st.lists(OPS, max_size=8))
    header["o"] = ops
    blob = draw(st.binary(max_size=48))
    header["n"] = draw(st.one_of(st.just(len(blob)), st.integers(-1, 10**9)))
    if draw(st.booleans()):
        header["z"] = draw(st.one_of(st.integers(-1, 10**6), st.just("z")))
    line = json.dumps(header).encode()
    match draw(st.integers(0, 9)):
        case 9:
            line = b"[" * 3000 + b"]" * 3000
        case 8:
            line = line[: draw(st.integers(0, len(line)))]
        case 7:
            blob = zstandard.ZstdCompressor(write_checksum=True).compress(blob)
    return line + b"\n" + blob


@dataclass(frozen=True)
class Sent:
    """One fuzzed request, as bytes on the wire."""

    method: str
    target: bytes
    data: bytes


@st.composite
def requests(draw: st.DrawFn, refs: st.SearchStrategy[str]) -> Sent:
    method = draw(st.one_of(METHODS, METHODS_ODD)) if draw(st.booleans()) else "POST"
    segments = draw(st.lists(SEGMENTS, max_size=4))
    if draw(st.integers(0, 9)) < 7:  # mostly an endpoint the gateway knows, then fuzz
        segments = [*draw(ENDPOINT_PATHS).split("/"), *segments[: draw(st.integers(0, 1))]]
    name = draw(st.sampled_from(["up", "other"])) if draw(st.integers(0, 9)) < 8 else draw(NAMES)
    target = "/llm/" + name + "/" + "/".join(segments)
    if query := draw(QUERIES):
        target += "?" + query
    raw_target = target.encode("utf-8")
    headers = draw(st.lists(HEADERS, max_size=6))
    if draw(st.integers(0, 9)) < 8:
        headers.insert(0, ("Toolref-Key", draw(st.sampled_from([KEY_A, KEY_B]))))
    if draw(st.integers(0, 9)) < 7:
        headers.insert(0, ("Toolref-Protocol", "2"))
    document = json.dumps(draw(documents(refs))).encode()
    body = document
    match draw(st.integers(0, 9)):  # hypothesis draws 0 most: the usual case
        case 9 | 8:
            body = gzip.compress(document)
            headers.append(("Content-Encoding", "gzip"))
        case 7:
            body = zstandard.ZstdCompressor().compress(document)
            headers.append(("Content-Encoding", "zstd"))
        case 6:
            body = draw(st.binary(max_size=64))
        case 5:
            body = b""
        case 4 | 3:
            body = draw(edits(document))
            headers.append(("Content-Type", MEDIA_TYPE))
    framing = draw(st.sampled_from(["length", "length", "chunked", "both", "twice", "none"]))
    lines = [f"{method} ".encode() + raw_target + b" HTTP/1.1"]
    match draw(st.integers(0, 19)):  # mostly one Host, as HTTP/1.1 wants (it is not sent on)
        case 19:
            pass
        case 18:
            lines += [b"Host: 127.0.0.1", b"Host: evil.example"]
        case 17:
            lines.append(b"Host: evil.example:1")
        case _:
            lines.append(b"Host: 127.0.0.1")
    lines += [f"{k}: {v}".encode() for k, v in headers]
    if framing == "none":
        body = b""
    elif framing in ("length", "twice"):
        lines += [b"Content-Length: %d" % len(body)] * (2 if framing == "twice" else 1)
    else:
        lines.append(b"Transfer-Encoding: chunked")
        if framing == "both":
            lines.append(b"Content-Length: %d" % draw(st.integers(0, 10**6)))
        cut = draw(st.integers(0, len(body)))
        pieces = [p for p in (body[:cut], body[cut:]) if p]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return Sent(method, raw_target, b"\r\n".join(lines) + b"\r\n\r\n" + body)


# --- the run ----------------------------------------------------------------------------


async def answer_to(url: str, sent: Sent) -> Reply | None:
    """The answer to `sent` on a new connection (past interim 1xx), None when the
    connection closed without one."""
    reader, writer = await opened(url)
    try:
        writer.write(sent.data)
        await writer.drain()
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            line, *lines = head[:-4].decode("latin-1").split("\r\n")
            pairs = [(n.strip(), v.strip()) for n, _, v in (x.partition(":") for x in lines)]
            reply = Reply(int(line.split()[1]), pairs, b"")
            if reply.status >= 200:
                break
        if sent.method != "HEAD" and reply.status not in (204, 304):
            await _body(reader, reply)
        return reply
    finally:
        writer.close()


async def _body(reader: asyncio.StreamReader, reply: Reply) -> None:
    if (reply.header("transfer-encoding") or "").lower() == "chunked":
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            reply.body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
    else:
        reply.body = await reader.readexactly(int(reply.header("content-length") or "0"))


@dataclass
class Tally:
    examples: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)  # refusals by problem type


async def register(url: str, key: str | None) -> list[str]:
    """Two invocations stored for the tenant of `key`: their refs."""
    invocations = [
        {"name": "Read", "args": {"file_path": f"/src/{n}.py"}, "result": f"line {n}\n" * 50}
        for n in range(2)
    ]
    headers = {"Toolref-Protocol": "2", **({"Authorization": f"Bearer {key}"} if key else {})}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        answer = await client.post("/v1/invocations", json={"invocations": invocations})
    assert answer.status_code == 200, answer.text
    return [item["ref"] for item in answer.json()["refs"]]


async def flushed(redis: Redis) -> None:
    await redis.flushall()


def fuzz(
    loop: asyncio.AbstractEventLoop, url: str, redis: Redis, key: str | None, seconds: float
) -> Tally:
    """Runs in a thread: hypothesis drives requests on `loop`, where the servers run."""
    tally = Tally()

    def call(coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(60)

    known = call(register(url, key))

    @given(requests(st.one_of(st.sampled_from(known), REF)))
    def example(sent: Sent) -> None:
        if len(call(all_keys(redis))) > 300:  # keep each snapshot small
            call(flushed(redis))
            call(register(url, key))  # the same refs again
        before = call(snapshot(redis))
        reply = call(answer_to(url, sent))
        tally.examples += 1
        assert reply is not None, f"no answer to {sent.data[:300]!r}"
        tally.statuses[reply.status] += 1
        assert reply.status < 500, (sent.data[:300], reply.body[:500])
        if reply.status >= 400 and reply.header("x-fake-upstream") is None:
            assert reply.header("content-type") == PROBLEM, reply
            assert call(snapshot(redis)) == before, f"a refusal changed the store: {sent}"
            kind = json.loads(reply.body)["type"] if sent.method != "HEAD" else "head:"
            tally.problems[kind.rsplit(":", 1)[-1] or str(reply.status)] += 1

    checks = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    count = ROUND if seconds > 0 else EXAMPLES
    run = settings(max_examples=count, deadline=None, suppress_health_check=checks)(example)
    end = time.monotonic() + seconds
    run()
    while time.monotonic() < end:  # with `seconds`: more rounds, each of new examples
        run()
    return tally


@pytest.mark.parametrize("mode", ["keys", "open"])
async def test_fuzzed_gateway_requests_get_no_5xx_and_refusals_change_nothing(
    redis: Redis, mode: str
) -> None:
    keys = {"api_keys": KEYS} if mode == "keys" else {}
    async with (
        StrictUpstream() as upstream,
        gateway(
            redis,
            upstreams=f"up={upstream.url}/api,other={upstream.url}/base",
            body_timeout=2,
            **keys,
        ) as url,
    ):
        loop = asyncio.get_running_loop()
        key = KEY_A if mode == "keys" else None
        tally = await asyncio.to_thread(fuzz, loop, url, redis, key, SECONDS / 2)
    print(  # the figures docs/reliability.md records
        f"\n{mode}: {tally.examples} examples, statuses {sorted(tally.statuses.items())}; "
        f"refusals (keyspace checked) {sorted(tally.problems.items())}"
    )
    assert upstream.refused == []
    for target in upstream.targets:
        path = target.split(b"?", 1)[0]
        assert path.startswith((b"/api/", b"/base/")), target
        for piece in path.split(b"/"):
            assert unquote_to_bytes(piece).split(b";")[0] not in (b".", b".."), target
