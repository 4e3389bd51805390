"""Tenant isolation on every endpoint: another tenant's ref behaves exactly like a ref nobody
ever registered, and an export of one tenant holds nothing of another.

For every endpoint that takes a ref (resolve, findMissing, GET, GET with the owner's ETag,
summary, hydrate in full and summary mode, handoff), tenant B probes the same ref twice --
before tenant A registered it (and cached its summary), and after -- and probes a ref nobody
ever registered. The three answers have the same status, the same headers (but for the
request id), the same body byte for byte once the ref itself is masked, and the same `missing`
lists; and the store saw the same commands with the same arguments, all in B's namespace.
That last part is the structural check of timing-insensitivity: it is one lookup of one key
of B's either way, so nothing about A can show in how long it takes. Commands are recorded
where redis-py packs them onto a connection, so the same recording works on one node and on
a cluster (where MONITOR would have to watch every node).

Registering endpoints (register, optimize, hydrate with full payloads) give B byte-identical
answers whether A holds the invocation or not: `new: true` and `newRefs: 1`, never a cache
hit. The design asks for exactly that: "nothing of one tenant can be read, probed or
overwritten through another tenant's credentials" (keys are namespaced by tenant).

tests/service/test_tenants.py covers the keys themselves.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import msgpack
import pytest
import zstandard
from redis import Redis as SyncRedis
from redis import RedisCluster as SyncCluster
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from tests.support.processes import ROOT, clean_env
from toolref.wire.canonical import Ref, digest_of
from toolref.wire.errors import ValidationError
from toolref_server import export
from toolref_server.app import create_app
from toolref_server.settings import Settings
from toolref_server.storage.redis import is_cluster_url, plain_url

from ..conftest import all_keys, key_names

ACME, GLOBEX = "acme-key-1", "globex-key-1"
KEYS: Final = ",".join(
    f"{tenant}={hashlib.sha256(key.encode()).hexdigest()}"
    for tenant, key in (("acme", ACME), ("globex", GLOBEX))
)
SECRET: Final[dict[str, Any]] = {
    "name": "read_file",
    "args": {"path": "acme.txt"},
    "result": "acme's secret " * 40,
}
NEVER: Final[dict[str, Any]] = {
    "name": "read_file",
    "args": {"path": "never.txt"},
    "result": "nobody's " * 40,
}
OTHER: Final[dict[str, Any]] = {"name": "bash", "args": {"cmd": "true"}, "result": ""}
THEIRS: Final = str(digest_of(SECRET).ref)
UNKNOWN: Final = str(digest_of(NEVER).ref)
ALSO_UNKNOWN: Final = str(digest_of(OTHER).ref)
ETAGS: Final = {THEIRS: digest_of(SECRET).sha256.hex(), UNKNOWN: digest_of(NEVER).sha256.hex()}
# Headers that differ per request whatever the tenant.
REQUEST_SPECIFIC: Final = frozenset({"x-request-id", "date"})


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


def markers(ref: str) -> list[dict[str, Any]]:
    """A conversation whose one invocation is a marker for `ref`."""
    messages = chat(SECRET)
    del messages[1]["tool_calls"][0]["function"]["arguments"]
    messages[1]["tool_calls"][0]["function"]["toolRef"] = ref
    del messages[2]["content"]
    messages[2]["toolRef"] = ref
    return messages


# --- recording what the store is sent ---


@dataclass
class Commands:
    """Every command redis-py packs onto any async connection while `recording`."""

    sent: list[tuple[bytes, ...]] = field(default_factory=list)
    recording: bool = False

    @contextmanager
    def record(self) -> Iterator[list[tuple[bytes, ...]]]:
        self.sent, self.recording = [], True
        try:
            yield self.sent
        finally:
            self.recording = False


def _commands(packed: bytes) -> Iterator[tuple[bytes, ...]]:
    """The commands in `packed`, RESP arrays of bulk strings as a client writes them."""
    at = 0
    while at < len(packed):
        end = packed.index(b"\r\n", at)
        count, at = int(packed[at + 1 : end]), end + 2
        args = []
        for _ in range(count):
            end = packed.index(b"\r\n", at)
            size, at = int(packed[at + 1 : end]), end + 2
            args.append(packed[at : at + size])
            at += size + 2
        yield tuple(args)


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> Commands:
    seen = Commands()
    original = AbstractConnection.send_packed_command

    async def send_packed_command(
        self: AbstractConnection, command: Any, check_health: bool = True
    ) -> None:
        if seen.recording:
            packed = command if isinstance(command, bytes) else b"".join(map(bytes, command))
            seen.sent.extend(_commands(packed))
        await original(self, command, check_health)

    # Pipelines (redis-py's and the store's `commands.Batch`), scripts and single commands
    # all reach the wire through here, on the node client and on every node connection of
    # the cluster client.
    monkeypatch.setattr(AbstractConnection, "send_packed_command", send_packed_command)
    return seen


def masked(sent: list[tuple[bytes, ...]], ref: str) -> list[tuple[bytes, ...]]:
    key = Ref(ref).key.encode()
    return [tuple(arg.replace(key, b"<REF>") for arg in command) for command in sent]


def shapes(sent: list[tuple[bytes, ...]]) -> list[tuple[bytes, int]]:
    return [(command[0].upper(), len(command)) for command in sent]


def assert_only_in(sent: list[tuple[bytes, ...]], tenant: str) -> None:
    """Every key-like argument belongs to `tenant`."""
    for command in sent:
        for arg in command:
            if arg.startswith(b"tr:"):
                assert arg.startswith(f"tr:{tenant}:".encode()), command


# --- the clients ---


@dataclass
class Tenants:
    acme: httpx.AsyncClient
    globex: httpx.AsyncClient
    nobody: httpx.AsyncClient  # no Authorization header
    stranger: httpx.AsyncClient  # a key no tenant has


@pytest.fixture
async def tenants(redis: Redis) -> AsyncIterator[Tenants]:
    app = create_app(Settings(redis_url="unused", api_keys=KEYS), redis=redis)
    clients = [
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://toolref.test",
            headers={"Toolref-Protocol": "2", **auth},
        )
        for auth in (
            {"Authorization": f"Bearer {ACME}"},
            {"Authorization": f"Bearer {GLOBEX}"},
            {},
            {"Authorization": "Bearer not-a-key"},
        )
    ]
    async with app.router.lifespan_context(app):
        yield Tenants(*clients)
    for client in clients:
        await client.aclose()


Probe = Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]

PROBES: Final[dict[str, Probe]] = {
    "resolve": lambda c, ref: c.post("/v1/invocations:resolve", json={"refs": [ref]}),
    "resolve-batch": lambda c, ref: c.post(
        "/v1/invocations:resolve", json={"refs": [ALSO_UNKNOWN, ref, ALSO_UNKNOWN]}
    ),
    "findMissing": lambda c, ref: c.post("/v1/invocations:findMissing", json={"refs": [ref]}),
    "findMissing-batch": lambda c, ref: c.post(
        "/v1/invocations:findMissing", json={"refs": [ref, ALSO_UNKNOWN]}
    ),
    "get": lambda c, ref: c.get(f"/v1/invocations/{ref}"),
    "get-msgpack": lambda c, ref: c.get(
        f"/v1/invocations/{ref}", headers={"Accept": "application/msgpack"}
    ),
    # The owner's ETag: a 304 here would confirm the invocation without reading it.
    "get-if-none-match": lambda c, ref: c.get(
        f"/v1/invocations/{ref}", headers={"If-None-Match": f'"{ETAGS[ref]}"'}
    ),
    "summary": lambda c, ref: c.get(f"/v1/invocations/{ref}/summary"),
    "summary-budget": lambda c, ref: c.get(
        f"/v1/invocations/{ref}/summary", params={"maxChars": "100"}
    ),
    "hydrate": lambda c, ref: c.post("/v1/messages:hydrate", json={"messages": markers(ref)}),
    "hydrate-summary": lambda c, ref: c.post(
        "/v1/messages:hydrate", json={"messages": markers(ref), "mode": "summary"}
    ),
    "handoff": lambda c, ref: c.post("/v1/context:handoff", json={"messages": markers(ref)}),
}
# What each probe's `missing` list is when the ref is not held (None: the answer has none).
MISSING: Final[dict[str, Callable[[str], list[str] | None]]] = {
    "resolve": lambda ref: [ref],
    "resolve-batch": lambda ref: [ALSO_UNKNOWN, ref],
    "findMissing": lambda ref: [ref],
    "findMissing-batch": lambda ref: [ref, ALSO_UNKNOWN],
    "hydrate": lambda ref: [ref],
    "hydrate-summary": lambda ref: [ref],
    "handoff": lambda ref: [ref],
}


@dataclass
class Seen:
    status: int
    headers: dict[str, str]
    body: bytes
    missing: list[str] | None
    sent: list[tuple[bytes, ...]]

    def masking(self, ref: str) -> tuple[int, dict[str, str], bytes, Any, Any]:
        """Everything about the answer and the store commands, with `ref` masked. Commands
        as a multiset: a cluster client sends one pipeline per node, so how the commands
        of a batch interleave depends on which node each ref's hash slot lives on -- on the
        ref, not on the tenant (the same ref is compared in order below)."""
        return (
            self.status,
            {k: v.replace(ref, "<REF>") for k, v in self.headers.items()},
            self.body.replace(ref.encode(), b"<REF>"),
            None if self.missing is None else [r.replace(ref, "<REF>") for r in self.missing],
            sorted(masked(self.sent, ref)),
        )


async def observe(
    probe: Probe, client: httpx.AsyncClient, ref: str, commands: Commands, endpoint: str
) -> Seen:
    with commands.record() as sent:
        response = await probe(client, ref)
    missing = None
    if endpoint in MISSING:
        answer = response.json()
        missing = answer.get("missing", answer.get("missingRefs"))
        assert missing == MISSING[endpoint](ref), response.text
    headers = {k: v for k, v in response.headers.items() if k not in REQUEST_SPECIFIC}
    return Seen(response.status_code, headers, response.content, missing, list(sent))


@pytest.mark.parametrize("endpoint", list(PROBES))
async def test_another_tenants_ref_is_exactly_an_unknown_ref(
    tenants: Tenants, commands: Commands, endpoint: str
) -> None:
    acme, globex = tenants.acme, tenants.globex
    probe = PROBES[endpoint]
    # Warm up: the store's read script is loaded, so no probe pays for SCRIPT LOAD.
    assert (await acme.post("/v1/invocations:resolve", json={"refs": [UNKNOWN]})).is_success

    before = await observe(probe, globex, THEIRS, commands, endpoint)  # nobody holds it yet
    registered = await acme.post("/v1/invocations", json={"invocations": [SECRET]})
    assert registered.json()["refs"][0]["ref"] == THEIRS
    assert (await acme.get(f"/v1/invocations/{THEIRS}/summary")).status_code == 200  # cached
    foreign = await observe(probe, globex, THEIRS, commands, endpoint)
    unknown = await observe(probe, globex, UNKNOWN, commands, endpoint)

    assert foreign.status in (404, 409) or endpoint.startswith(("resolve", "findMissing"))
    assert b"acme's secret" not in foreign.body
    # Byte for byte what globex saw before acme held it, and the same store commands in the
    # same order ...
    assert foreign.masking(THEIRS) == before.masking(THEIRS)
    assert foreign.sent == before.sent
    # ... and what a ref nobody registered gets, once the ref is masked.
    assert foreign.masking(THEIRS) == unknown.masking(UNKNOWN)
    # One code path: the same commands with the same argument counts, all in globex's
    # namespace (on one node one script call, on a cluster MGETs and EXPIREs per slot).
    assert foreign.sent, "the probe sent the store nothing: nothing was compared"
    assert shapes(foreign.sent) == shapes(before.sent)
    assert sorted(shapes(foreign.sent)) == sorted(shapes(unknown.sent))
    assert_only_in(foreign.sent + unknown.sent + before.sent, "globex")

    # The owner still reads it (a 304 for its own ETag).
    mine = await probe(acme, THEIRS)
    assert mine.status_code == (304 if endpoint == "get-if-none-match" else 200), mine.text


async def test_requests_without_a_valid_key_never_reach_the_store(
    tenants: Tenants, commands: Commands
) -> None:
    """No key and an unknown key are refused before any lookup; so is a probe of a held ref
    through them: the 401 is the same for a held ref and an unknown one."""
    await tenants.acme.post("/v1/invocations", json={"invocations": [SECRET]})
    for client in (tenants.nobody, tenants.stranger):
        answers = []
        for endpoint, probe in PROBES.items():
            for ref in (THEIRS, UNKNOWN):
                with commands.record() as sent:
                    response = await probe(client, ref)
                assert response.status_code == 401, (endpoint, response.text)
                assert sent == [], (endpoint, sent)
                answers.append(
                    (response.content, {**response.headers, "x-request-id": ""}, endpoint)
                )
        assert len({(body, str(sorted(h.items()))) for body, h, _ in answers}) == 1


# --- registering endpoints: the same answer whether another tenant holds it or not ---

Store = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]

STORING: Final[dict[str, Store]] = {
    "register": lambda c: c.post("/v1/invocations", json={"invocations": [SECRET]}),
    "optimize": lambda c: c.post("/v1/messages:optimize", json={"messages": chat(SECRET)}),
    "hydrate": lambda c: c.post("/v1/messages:hydrate", json={"messages": chat(SECRET)}),
}


async def _forget(redis: Redis, tenant: str) -> None:
    for key in await all_keys(redis):
        if bytes(key).startswith(f"tr:{tenant}:".encode()):
            await redis.delete(key)


def _new_flags(endpoint: str, answer: dict[str, Any]) -> tuple[int, int]:
    """(new, already held) as the answer reports them."""
    if endpoint == "register":
        new = sum(item["new"] for item in answer["refs"])
        return new, len(answer["refs"]) - new
    stats = answer["optimizationStats"]
    return stats["newRefs"], stats["cacheHits"]


def _ref_of(endpoint: str, answer: dict[str, Any]) -> str:
    ref: str = (
        answer["refs"][0]["ref"] if endpoint == "register" else answer["toolReferences"]["call_1"]
    )
    return ref


@pytest.mark.parametrize("endpoint", list(STORING))
async def test_registering_learns_nothing_of_another_tenant(
    tenants: Tenants, commands: Commands, redis: Redis, endpoint: str
) -> None:
    acme, globex = tenants.acme, tenants.globex
    call = STORING[endpoint]
    await acme.post("/v1/invocations:resolve", json={"refs": [UNKNOWN]})  # warm up
    with commands.record() as alone_sent:
        alone = await call(globex)  # nobody holds it
    alone_keys = await key_names(redis)
    await _forget(redis, "globex")
    assert (await call(acme)).status_code == 200  # acme registers the very same invocation
    with commands.record() as shared_sent:
        shared = await call(globex)  # acme holds it
    assert alone.status_code == shared.status_code == 200, shared.text
    assert _new_flags(endpoint, shared.json()) == (1, 0)  # new for globex, no cache hit
    assert shared.content == alone.content
    assert {k: v for k, v in shared.headers.items() if k not in REQUEST_SPECIFIC} == {
        k: v for k, v in alone.headers.items() if k not in REQUEST_SPECIFIC
    }
    assert shapes(shared_sent) == shapes(alone_sent)
    assert_only_in(shared_sent, "globex")
    ref_key = Ref(_ref_of(endpoint, shared.json())).key
    assert alone_keys == [f"tr:globex:i:{ref_key}"]
    assert await key_names(redis) == [f"tr:acme:i:{ref_key}", f"tr:globex:i:{ref_key}"]
    # Control: the flag does work within one tenant.
    again = await call(globex)
    assert _new_flags(endpoint, again.json()) == (0, 1)


# --- cache export ---


@contextmanager
def sync_client(url: str) -> Iterator[SyncRedis | SyncCluster]:
    client: SyncRedis | SyncCluster
    if is_cluster_url(url):
        client = SyncCluster.from_url(plain_url(url))
    else:
        client = SyncRedis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def read_export(data: bytes) -> tuple[dict[str, Any], list[list[Any]]]:
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data))
    header, *items = list(msgpack.Unpacker(reader, raw=False))
    return header, items


async def _two_tenants_with_summaries(tenants: Tenants) -> None:
    for client, invocation in ((tenants.acme, SECRET), (tenants.globex, NEVER)):
        answer = await client.post("/v1/messages:optimize", json={"messages": chat(invocation)})
        ref = answer.json()["toolReferences"]["call_1"]
        assert (await client.get(f"/v1/invocations/{ref}/summary")).status_code == 200
    # globex holds acme's invocation too: its own copy, under its own key.
    await tenants.globex.post("/v1/invocations", json={"invocations": [SECRET]})


async def test_an_export_of_one_tenant_holds_nothing_of_another(
    tenants: Tenants, redis: Redis, engine_url: str
) -> None:
    await _two_tenants_with_summaries(tenants)
    names = await key_names(redis)
    for tenant in ("acme", "globex"):
        with sync_client(engine_url) as sync:
            out = io.BytesIO()
            count = export.export(sync, out, tenant)
        header, items = read_export(out.getvalue())
        assert header["tenant"] == tenant
        exported = sorted(bytes(item[0]).decode() for item in items)
        assert count == len(exported)
        # Exactly that tenant's records and summaries, and nothing else.
        assert exported == [n for n in names if n.startswith(f"tr:{tenant}:")]
        assert any(":s:" in n for n in exported)
        assert any(":i:" in n for n in exported)
    with sync_client(engine_url) as sync:
        everything = export.export(sync, io.BytesIO(), None)
    assert everything == len(names)


async def test_the_cli_exports_one_tenant(
    tenants: Tenants, redis: Redis, engine_url: str, tmp_path: Path
) -> None:
    await _two_tenants_with_summaries(tenants)
    target = tmp_path / "globex.export"
    done = cli("export", str(target), "--tenant", "globex", "--redis-url", engine_url)
    assert done.returncode == 0, done.stderr
    header, items = read_export(target.read_bytes())
    assert header["tenant"] == "globex"
    exported = sorted(bytes(item[0]).decode() for item in items)
    assert exported == [n for n in await key_names(redis) if n.startswith("tr:globex:")]


# Names that are no tenant: as SCAN patterns, each matched other tenants' keys ("" and "*"
# every tenant, "acm?" acme, "acme:i" acme's records under another name).
NOT_TENANTS: Final = ["", "*", "acm?", "[ag]*", "acme:i", "globex:*", "acme\\"]


@pytest.mark.parametrize("name", NOT_TENANTS)
async def test_an_export_of_a_name_that_is_no_tenant_is_refused(
    tenants: Tenants, engine_url: str, name: str
) -> None:
    """Found here: `--tenant ""` (an unset variable in a script) exported every tenant, and
    glob characters widened the match; now the tenant grammar of TOOLREF_API_KEYS applies."""
    await _two_tenants_with_summaries(tenants)
    with sync_client(engine_url) as sync:
        out = io.BytesIO()
        with pytest.raises(ValidationError, match="not a tenant name"):
            export.export(sync, out, name)
    assert out.getvalue() == b""  # refused before anything was written


async def test_the_cli_refuses_an_empty_tenant(
    tenants: Tenants, engine_url: str, tmp_path: Path
) -> None:
    await _two_tenants_with_summaries(tenants)
    target = tmp_path / "all.export"
    done = cli("export", str(target), "--tenant", "", "--redis-url", engine_url)
    assert done.returncode == 2, done.stderr
    assert "not a tenant name" in done.stderr
    assert not target.exists() or target.stat().st_size == 0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolref_server.cli", "cache", *args],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
