"""One summary computation across processes: two real `toolref-server serve` processes on one
engine, and a real OpenAI-compatible stub server that counts the calls it gets."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.processes import Service
from toolref_server.embedded import free_port, valkey_server_binary

from ..conftest import ON_CLUSTER, client_for, need

MODEL = "stub-model"
ANSWER = "read_file src/app.py: 400 numbered lines, nothing failed."
DELAY = 0.5  # the stub thinks this long, so concurrent requests really overlap
MAX_CHARS = 300
SUMMARIZER_ID = f"openai-compatible:{MODEL}:v1:{MAX_CHARS}"
LINES = "".join(f"line {i:04d}\n" for i in range(400))


def invocation(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "args": {"path": path}, "result": LINES}


class CountingStub:
    """`POST /v1/chat/completions` on a free port: counts calls, waits DELAY, then answers
    ANSWER, or 500 for tools named `flaky_*`. Anything else is a 404, counted apart."""

    def __init__(self) -> None:
        self.calls = 0
        self.tools: list[str] = []
        self.others = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/chat/completions":
                    with stub._lock:
                        stub.others += 1
                    self.send_error(404)
                    return
                user = json.loads(body)["messages"][1]["content"]
                tool = user.removeprefix("Tool: ").split("\n", 1)[0]
                with stub._lock:
                    stub.calls += 1
                    stub.tools.append(tool)
                time.sleep(DELAY)
                if tool.startswith("flaky_"):
                    self.send_error(500)
                    return
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def calls_for(self, tool: str) -> int:
        with self._lock:
            return self.tools.count(tool)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


@dataclass
class Cluster:
    stub: CountingStub
    services: tuple[Service, Service]
    engine_url: str


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """Two service processes on one engine (the first one's embedded engine, or the test
    cluster on the cluster run), one stub."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    stub = CountingStub()
    root = tmp_path_factory.mktemp("single-flight")
    llm = {"TOOLREF_LLM_BASE_URL": stub.url, "TOOLREF_LLM_MODEL": MODEL}
    first = second = None
    try:
        shared = {"TOOLREF_REDIS_URL": request.getfixturevalue("engine_url")} if ON_CLUSTER else {}
        first = Service(root / "first", free_port(), **shared, **llm)
        engine_url = shared["TOOLREF_REDIS_URL"] if ON_CLUSTER else first.engine_url
        second = Service(root / "second", free_port(), TOOLREF_REDIS_URL=engine_url, **llm)
        yield Cluster(stub, (first, second), engine_url)
    finally:
        if second is not None:
            second.stop()
        if first is not None:
            first.stop()  # last: it owns the engine
        stub.close()


@pytest.fixture
async def redis(cluster: Cluster) -> AsyncIterator[Redis]:
    client = client_for(cluster.engine_url)
    yield client
    await client.aclose()


def register(cluster: Cluster, item: dict[str, Any]) -> str:
    response = httpx.post(
        cluster.services[0].url + "/v1/invocations",
        json={"invocations": [item]},
        headers={"Toolref-Protocol": "2"},
    )
    assert response.status_code == 200, response.text
    ref: str = response.json()["refs"][0]["ref"]
    return ref


def summary_key(ref: str) -> str:
    return f"tr:local:s:{ref.removeprefix('tr_')}:{SUMMARIZER_ID}"


async def ask_concurrently(cluster: Cluster, ref: str, count: int) -> list[httpx.Response]:
    """`count` concurrent summary requests, alternating between the two processes."""
    params = {"summarizer": "openai-compatible", "maxChars": str(MAX_CHARS)}
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.get(
                    f"{cluster.services[i % 2].url}/v1/invocations/{ref}/summary", params=params
                )
                for i in range(count)
            )
        )


def test_the_two_processes_share_one_engine(cluster: Cluster) -> None:
    # What the tests below rely on: a ref registered through one is held by the other.
    ref = register(cluster, invocation("read_file", "shared.py"))
    second = cluster.services[1]
    response = httpx.get(f"{second.url}/v1/invocations/{ref}", headers={"Toolref-Protocol": "2"})
    assert response.status_code == 200
    assert response.json()["result"] == LINES
    assert not (second.data_dir / "valkey.sock").exists()  # the second started no engine
    capabilities = httpx.get(f"{second.url}/v1/capabilities").json()
    assert "openai-compatible" in json.dumps(capabilities)


async def test_fifty_concurrent_requests_over_two_processes_make_one_model_call(
    cluster: Cluster, redis: Redis
) -> None:
    """The acceptance test: 50 concurrent requests for one summary, spread over two service
    processes, cause exactly one call to the counting stub."""
    ref = register(cluster, invocation("read_file", "src/app.py"))
    started = time.monotonic()
    responses = await ask_concurrently(cluster, ref, 50)
    elapsed = time.monotonic() - started

    assert [r.status_code for r in responses] == [200] * 50, [r.text for r in responses[:3]]
    answers = [r.json() for r in responses]
    assert {a["summary"] for a in answers} == {ANSWER}
    assert {a["summarizer"] for a in answers} == {SUMMARIZER_ID}
    assert not any(a["fallback"] for a in answers)
    assert cluster.stub.calls_for("read_file") == 1
    assert cluster.stub.others == 0
    assert elapsed >= DELAY  # everyone waited for the one call ...
    assert elapsed < DELAY + 5  # ... and not for a lock timeout
    assert await redis.get(summary_key(ref)) == ANSWER.encode()
    assert not await redis.exists(summary_key(ref) + ":lock")

    # Afterwards both processes serve it from the cache.
    again = await ask_concurrently(cluster, ref, 4)
    assert all(r.json() == {**answers[0], "cached": True} for r in again)
    assert cluster.stub.calls_for("read_file") == 1


async def test_a_crashed_holder_blocks_the_others_only_until_its_lock_expires(
    cluster: Cluster, redis: Redis
) -> None:
    ref = register(cluster, invocation("read_notes", "notes.md"))
    # A holder that took the lock and died before writing a summary.
    await redis.set(summary_key(ref) + ":lock", b"token-of-a-dead-process", px=1000)
    started = time.monotonic()
    responses = await ask_concurrently(cluster, ref, 6)
    elapsed = time.monotonic() - started

    assert [r.status_code for r in responses] == [200] * 6
    answers = [r.json() for r in responses]
    assert {a["summary"] for a in answers} == {ANSWER}
    assert not any(a["fallback"] for a in answers)
    assert cluster.stub.calls_for("read_notes") == 1  # one of them took over, once
    assert elapsed >= 0.8 + DELAY  # they waited for the lock to expire, then for the call
    assert elapsed < 5  # far sooner than the wait limit (TOOLREF_LLM_TIMEOUT + 2 = 10 s)
    assert await redis.get(summary_key(ref)) == ANSWER.encode()


async def test_a_failing_model_is_called_once_and_every_request_falls_back(
    cluster: Cluster, redis: Redis
) -> None:
    ref = register(cluster, invocation("flaky_reader", "flaky.txt"))
    started = time.monotonic()
    responses = await ask_concurrently(cluster, ref, 10)
    elapsed = time.monotonic() - started

    assert [r.status_code for r in responses] == [200] * 10
    answers = [r.json() for r in responses]
    assert {a["summarizer"] for a in answers} == {f"extractive:v1:{MAX_CHARS}"}
    assert all(a["fallback"] for a in answers)
    assert len({a["summary"] for a in answers}) == 1
    assert cluster.stub.calls_for("flaky_reader") == 1  # the waiters did not call it again
    assert elapsed < DELAY + 2  # they fell back as soon as the holder failed
    assert await redis.get(summary_key(ref)) is None  # failures are never cached
