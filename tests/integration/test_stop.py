"""`toolref-server serve` stopped (SIGTERM) with a gateway answer still under way past
TOOLREF_SHUTDOWN_TIMEOUT: a real process, an upstream that never finishes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Service
from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, need

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="runs the service on its embedded engine")

FIRST_EVENT = b'event: message_start\ndata: {"type": "message_start"}\n\n'


@contextlib.contextmanager
def endless_upstream(head: bool) -> Iterator[int]:
    """A provider that answers a stream's head and first event (`head`), or nothing, and
    then holds the connection for ever; its port."""
    ready: list[int] = []
    stop = threading.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if head:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n")
            writer.write(b"transfer-encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%s\r\n" % (len(FIRST_EVENT), FIRST_EVENT))
            await writer.drain()
        await asyncio.to_thread(stop.wait)
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        await asyncio.to_thread(stop.wait)
        await asyncio.sleep(0.3)  # the connections' handlers end first
        server.close()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    while not ready:
        stop.wait(0.01)
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.slow
@pytest.mark.parametrize("head", [True, False], ids=["answer-started", "nothing-sent"])
def test_a_request_the_stop_cancels_is_a_warning_not_a_crash(tmp_path: Path, head: bool) -> None:
    """Before the fix uvicorn logged each request cancelled at the end of the shutdown
    timeout as "Exception in ASGI application" with a CancelledError traceback. Now: one
    warning naming the request; a started answer is cut (the client sees an incomplete
    stream), one not started is a 503; the engine is stopped after, the exit status 0."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    with endless_upstream(head) as upstream:
        service = Service(
            tmp_path / "data",
            free_port(),
            TOOLREF_UPSTREAMS=f"anthropic=http://127.0.0.1:{upstream}",
            TOOLREF_SHUTDOWN_TIMEOUT="1",
        )
        try:
            seen: list[object] = []
            body = {"model": "m", "max_tokens": 8, "stream": True, "messages": []}
            with httpx.Client(timeout=60) as client:
                request = client.build_request(
                    "POST", service.url + "/llm/anthropic/v1/messages", json=body
                )
                response = client.send(request, stream=True) if head else None

                def stop_service() -> None:
                    os.kill(service.process.pid, signal.SIGTERM)

                if response is not None:
                    chunks = response.iter_raw()
                    seen.append(next(chunks))  # the first event came through
                    stop_service()
                    with pytest.raises(httpx.RemoteProtocolError):
                        seen.extend(chunks)
                else:
                    timer = threading.Timer(1.0, stop_service)
                    timer.start()
                    refused = client.send(request)
                    timer.join()
                    assert refused.status_code == 503
                    assert refused.json()["title"]
            assert service.process.wait(60) == 0
            output = service.output()
            assert "Exception in ASGI application" not in output, output
            assert "Traceback" not in output, output
            cut = "its answer was cut short" if head else "answered 503"
            assert f"before answering POST /llm/anthropic/v1/messages: {cut}" in output, output
            assert "embedded valkey stopped" in output, output
        finally:
            service.stop()
