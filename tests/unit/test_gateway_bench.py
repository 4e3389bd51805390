"""The gateway-speed bench's parts do what its report says they do: the fake upstream
answers each API's shape, the floor forwards both ways, the client reconnects after an idle
close, CPU counts children, and turns are told apart and charged as documented (timings
themselves are not asserted)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
from loadtests import fast_upstream, gateway_turns, passthrough, systems
from loadtests.gateway_turns import Forwarded, Hop, Turn, renamed
from loadtests.rawhttp import Connection, request
from loadtests.systems import Proc


@asynccontextmanager
async def serving(handler: object) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


def _chat(stream: bool) -> bytes:
    return json.dumps({"model": "m", "stream": stream, "messages": []}).encode()


async def test_the_fake_upstream_answers_in_the_shape_of_the_api_asked() -> None:
    async with serving(fast_upstream.handle) as url:
        conn = Connection.to(url)
        plain = await conn.send(request(url + "/v1/messages", _chat(False)))
        streamed = await conn.send(request(url + "/v1/messages", _chat(True)))
        chat = await conn.send(request(url + "/v1/chat/completions", _chat(True)))
        await conn.close()
    assert json.loads(plain.body)["type"] == "message"
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.body.startswith(b"event: message_start")
    assert chat.body.endswith(b"data: [DONE]\n\n")


async def test_the_fake_upstream_reads_a_chunked_body() -> None:
    async with serving(fast_upstream.handle) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        body = _chat(True)
        head = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        writer.write(head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        answer = await reader.readuntil(b"\r\n\r\n")
        writer.close()
    assert b"text/event-stream" in answer  # the body was read, and read whole


async def test_the_floor_forwards_requests_and_answers_on_a_kept_connection() -> None:
    async with serving(fast_upstream.handle) as upstream:
        target = upstream.removeprefix("http://")
        host, port = target.rsplit(":", 1)
        async with serving(partial(passthrough.handle, host, int(port))) as floor:
            conn = Connection.to(floor)
            first = await conn.send(request(floor + "/v1/messages", _chat(False)))
            second = await conn.send(request(floor + "/v1/chat/completions", _chat(False)))
            await conn.close()
    assert json.loads(first.body)["type"] == "message"
    assert json.loads(second.body)["object"] == "chat.completion"


async def test_the_client_sends_again_on_a_new_connection_after_an_idle_close() -> None:
    served = 0

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await reader.readuntil(b"\r\n\r\n")
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read(1)  # the next request's first byte: close without answering
        writer.close()

    async with serving(once) as url:
        conn = Connection.to(url)
        first = await conn.send(request(url + "/", b""))
        second = await conn.send(request(url + "/", b""))
        await conn.close()
    assert (first.body, second.body, served) == (b"ok", b"ok", 2)


def test_cpu_counts_the_processes_under_a_process() -> None:
    """A child that burns 0.3 s of CPU and stays: its time is the tree's, not its parent's."""
    burn = (
        "import time\nt = time.process_time()\n"
        "while time.process_time() - t < 0.3: pass\ntime.sleep(60)\n"
    )
    parent = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {burn!r}]).wait()\n"
    popen = subprocess.Popen([sys.executable, "-c", parent])
    proc = Proc("parent", "", popen)
    try:
        deadline = time.monotonic() + 30  # a bound on waiting, not a timing assert
        while time.monotonic() < deadline:
            proc.forget()
            if proc.cpu() >= 0.3 and len(proc.tree) == 2:
                break
            time.sleep(0.05)
        assert len(proc.tree) == 2
        assert proc.cpu() >= 0.3
        assert systems._ran(proc.tree[0]) < 0.3  # the parent only waits
    finally:
        for process in proc.tree[1:]:
            process.kill()
        popen.kill()
        popen.wait()


def test_renamed_changes_the_first_message_only() -> None:
    text = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    blocks = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}]
    once, twice = renamed(text), renamed(text)
    assert once[1:] == text[1:]
    assert once[0]["content"].endswith("be brief")
    assert once[0] != text[0]
    assert once[0] != twice[0]
    assert renamed(blocks)[0]["content"][0]["text"].endswith("hi")
    assert renamed(blocks)[0]["content"][1] == {"type": "image"}
    with pytest.raises(ValueError, match="cannot rename"):
        renamed([{"role": "user", "content": None}])


def test_turns_are_kinded_by_the_relays_first_body_and_charged_with_its_resends() -> None:
    def turn(direct: float) -> Turn:
        seconds = {"direct": direct, "floor": direct + 0.001, "after": direct + 0.010}
        return Turn(1000, seconds, {"floor": 0.0001, "after": 0.005})

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    hop = Hop(Proc("gateway", "", ended))  # not asked for its CPU here
    hop.forwarded = [
        Forwarded(0, False, 900, 0.004, 0.003, 200),  # whole
        Forwarded(1, True, 50, 0.003, 0.002, 409),  # a continuation, refused ...
        Forwarded(1, False, 800, 0.005, 0.004, 200),  # ... and resent whole
        Forwarded(2, True, 60, 0.003, 0.002, 200),
    ]
    kinds = gateway_turns._kinds([turn(0.001), turn(0.002), turn(0.001)], {"after": hop})
    whole, continued = kinds["after", "whole"], kinds["after", "continuation"]
    assert whole.wire == [900]
    assert continued.wire == [50, 60]
    assert continued.added["gateway"] == pytest.approx([0.006, 0.002])  # the resend counts
    assert continued.cpu["gateway"] == pytest.approx([0.006, 0.002])
    assert whole.added["relay + gateway"] == pytest.approx([0.010])
    assert whole.added["floor"] == pytest.approx([0.001])
