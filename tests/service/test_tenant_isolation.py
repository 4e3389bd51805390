"""Tenant isolation on every endpoint: another tenant's ref behaves exactly like a ref nobody
ever registered (same status, same body but for the ref itself, same store commands), and an
export of one tenant holds nothing of another. tests/service/test_tenants.py covers keys."""

from __future__ import annotations

import hashlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import msgpack
import pytest
import zstandard
from redis import Redis as SyncRedis
from redis.asyncio import Redis

from toolref.canonical import invocation_digest
from toolref_server import export
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..conftest import ON_CLUSTER

ACME, GLOBEX = "acme-key-1", "globex-key-1"
KEYS = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("acme", ACME), ("globex", GLOBEX))
)
SECRET: dict[str, Any] = {
    "name": "read_file",
    "args": {"path": "acme.txt"},
    "result": "acme's secret " * 40,
}
NEVER: dict[str, Any] = {
    "name": "read_file",
    "args": {"path": "never.txt"},
    "result": "nobody's " * 40,
}


def chat(invocation: dict[str, Any], call: str = "call_1") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {
                        "name": invocation["name"],
                        "arguments": str(invocation["args"]).replace("'", '"'),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call, "content": invocation["result"]},
    ]


class Recorder:
    """The shape of every store command sent: (command, number of arguments)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.commands: list[tuple[str, int]] = []

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self.redis.pipeline(*args, **kwargs)
        execute, recorder = pipe.execute, self

        async def recorded(*a: Any, **k: Any) -> Any:
            for command in pipe.command_stack:
                raw = getattr(command, "args", command[0] if isinstance(command, tuple) else ())
                recorder.commands.append((str(raw[0]).upper(), len(raw)))
            return await execute(*a, **k)

        pipe.execute = recorded  # type: ignore[method-assign]
        return pipe

    def register_script(self, script: str) -> Any:
        inner = self.redis.register_script(script)

        async def call(keys: list[str], args: list[Any]) -> Any:
            self.commands.append(("EVALSHA", len(keys) + len(args)))
            return await inner(keys=keys, args=args)

        return call

    def __getattr__(self, name: str) -> Any:
        return getattr(self.redis, name)


Probe = Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]


async def _optimized(client: httpx.AsyncClient, invocation: dict[str, Any]) -> list[Any]:
    answer = await client.post("/v1/messages:optimize", json={"messages": chat(invocation)})
    assert answer.status_code == 200, answer.text
    messages: list[Any] = answer.json()["messages"]
    return messages


def _markers(ref: str, invocation: dict[str, Any]) -> list[Any]:
    """A conversation whose one invocation is a marker for `ref`."""
    messages = chat(invocation)
    del messages[1]["tool_calls"][0]["function"]["arguments"]
    messages[1]["tool_calls"][0]["function"]["toolRef"] = ref
    del messages[2]["content"]
    messages[2]["toolRef"] = ref
    return messages


PROBES: dict[str, Probe] = {
    "resolve": lambda c, ref: c.post("/v1/invocations:resolve", json={"refs": [ref]}),
    "findMissing": lambda c, ref: c.post("/v1/invocations:findMissing", json={"refs": [ref]}),
    "get": lambda c, ref: c.get(f"/v1/invocations/{ref}"),
    "summary": lambda c, ref: c.get(f"/v1/invocations/{ref}/summary"),
    "hydrate": lambda c, ref: c.post(
        "/v1/messages:hydrate", json={"messages": _markers(ref, SECRET)}
    ),
    "handoff": lambda c, ref: c.post(
        "/v1/context:handoff", json={"messages": _markers(ref, SECRET)}
    ),
}


@pytest.fixture
async def tenants(
    redis: Redis,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, Recorder]]:
    """Clients of two tenants. On one node the store's commands are recorded; a cluster
    client is used as it is (its pipelines differ), and records nothing."""
    recorder = Recorder(redis)
    store: Any = redis if ON_CLUSTER else recorder
    app = create_app(Settings(redis_url="unused", api_keys=KEYS), redis=store)
    clients = []
    for key in (ACME, GLOBEX):
        clients.append(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://toolref.test",
                headers={"Toolref-Protocol": "2", "Authorization": f"Bearer {key}"},
            )
        )
    async with app.router.lifespan_context(app):
        yield clients[0], clients[1], recorder
    for client in clients:
        await client.aclose()


@pytest.mark.parametrize("endpoint", list(PROBES))
async def test_another_tenants_ref_is_exactly_an_unknown_ref(
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient, Recorder], endpoint: str
) -> None:
    acme, globex, recorder = tenants
    registered = await acme.post("/v1/invocations", json={"invocations": [SECRET]})
    theirs = registered.json()["refs"][0]["ref"]
    never = str(invocation_digest(NEVER["name"], NEVER["args"], NEVER["result"]).ref)
    probe = PROBES[endpoint]

    recorder.commands.clear()
    foreign = await probe(globex, theirs)
    foreign_commands = list(recorder.commands)
    recorder.commands.clear()
    unknown = await probe(globex, never)
    assert foreign.status_code == unknown.status_code
    assert foreign.status_code in (200, 404, 409)
    assert foreign.headers["content-type"] == unknown.headers["content-type"]
    assert foreign.content.replace(theirs.encode(), b"REF") == unknown.content.replace(
        never.encode(), b"REF"
    )
    assert b"acme's secret" not in foreign.content
    # One code path for both: the same store commands with the same argument counts.
    assert foreign_commands == recorder.commands
    assert bool(foreign_commands) is not ON_CLUSTER  # recorded on one node
    # The owner still gets it.
    assert (await probe(acme, theirs)).status_code == 200


async def test_optimize_learns_nothing_of_another_tenant(
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient, Recorder],
) -> None:
    acme, globex, _ = tenants
    await _optimized(acme, SECRET)
    first = await globex.post("/v1/messages:optimize", json={"messages": chat(SECRET)})
    again = await globex.post("/v1/messages:optimize", json={"messages": chat(SECRET)})
    # As if acme had never registered it: new for globex first, a cache hit only after.
    assert first.json()["optimizationStats"]["newRefs"] == 1
    assert first.json()["optimizationStats"]["cacheHits"] == 0
    assert again.json()["optimizationStats"]["cacheHits"] == 1


@pytest.mark.skipif(
    ON_CLUSTER, reason="export of one node's keyspace; cluster export is in tests/cluster"
)
async def test_an_export_of_one_tenant_holds_nothing_of_another(
    tenants: tuple[httpx.AsyncClient, httpx.AsyncClient, Recorder], engine_url: str
) -> None:
    acme, globex, _ = tenants
    await _optimized(acme, SECRET)
    await _optimized(globex, NEVER)
    await globex.get(
        f"/v1/invocations/{invocation_digest(NEVER['name'], NEVER['args'], NEVER['result']).ref}"
        "/summary"
    )
    with SyncRedis.from_url(engine_url) as sync:
        out = io.BytesIO()
        count = export.export(sync, out, "globex")
        everything = io.BytesIO()
        total = export.export(sync, everything, None)
    assert 0 < count < total
    data = out.getvalue()
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    items = list(msgpack.Unpacker(reader, raw=False))
    keys = [item[0] for item in items[1:]]
    assert len(keys) == count
    assert all(bytes(key).startswith(b"tr:globex:") for key in keys), keys
