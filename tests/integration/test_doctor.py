"""`toolref doctor` (issue 31): one probe through relay, gateway and each upstream, each hop
reported; the real service's gateway on the test engine, the relay served over real
sockets, providers faked (the scripted one, one that answers 404 to everything as a
provider would, and one that is down). New: there was no way to check the chain but to run
an agent and read its error.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis

import toolref
from tests.support.processes import clean_env
from tests.support.servers import serve, serve_all
from toolref_relay import Relay, RelayConfig
from toolref_relay.doctor import Hop, probe
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .relay_gateway import KEY, Scripted
from .test_relay_start import anthropic_like

TOOLREF = str(Path(sys.executable).with_name("toolref"))


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@asynccontextmanager
async def chain(
    redis: Redis, key: str | None = KEY, *, keys: bool = True
) -> AsyncIterator[tuple[Relay, str]]:
    """Relay -> gateway with three upstreams: `scripted` (answers its models), `plain`
    (a provider's 404 for everything) and `down` (nothing listens); the relay and its URL.
    `keys=False`: the gateway runs without API keys."""
    async with serve_all(Scripted().app(), anthropic_like()) as [scripted, plain]:
        upstreams = f"scripted={scripted},plain={plain},down={closed_port_url()}"
        tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}" if keys else ""
        settings = Settings(redis_url="unused", upstreams=upstreams, api_keys=tenant)
        async with serve(create_app(settings, redis=redis)) as gateway:
            relay = Relay(RelayConfig(gateway, key=key), report=lambda _: None)
            async with serve(relay) as url:
                yield relay, url


def by_name(hops: list[Hop]) -> dict[str, Hop]:
    return {hop.name.split(" (")[0]: hop for hop in hops}


async def test_each_hop_is_reported_and_a_down_upstream_fails(redis: Redis) -> None:
    async with chain(redis) as (relay, url):
        hops = by_name(await probe(url, relay.config.token))
    gateway = f"gateway {relay.config.gateway}"
    assert list(hops) == [
        f"relay {url}",
        gateway,
        "key",
        "upstream down",
        "upstream plain",
        "upstream scripted",
    ]
    assert hops[f"relay {url}"].ok
    assert hops[gateway].ok
    assert hops[gateway].detail == f"toolref {toolref.__version__}"
    assert hops["key"].ok
    assert hops["upstream scripted"].ok
    assert hops["upstream scripted"].status == 200
    assert hops["upstream plain"].ok  # the provider's own 404: the chain reaches it
    assert hops["upstream plain"].status == 404
    down = hops["upstream down"]
    assert not down.ok
    assert down.status == 502
    assert down.detail.startswith(f"toolref gateway {relay.config.gateway}:")
    for hop in hops.values():
        assert hop.seconds is None or hop.seconds >= 0


async def test_a_refused_key_fails_its_hop_and_no_upstream_is_probed(redis: Redis) -> None:
    async with chain(redis, key="not-the-tenant-key") as (relay, url):
        hops = await probe(url, relay.config.token)
    assert [hop.ok for hop in hops] == [True, True, False]
    assert hops[2].name == "key"
    assert "refuses the relay's key" in hops[2].detail


async def test_a_gateway_without_keys_is_said_to_need_none(redis: Redis) -> None:
    """Before, the key hop said "accepted" where no key was asked for."""
    async with chain(redis, key=None, keys=False) as (relay, url):
        hops = by_name(await probe(url, relay.config.token))
    assert hops["key"].ok
    assert hops["key"].detail == "not needed: the gateway runs without API keys (one local tenant)"


async def test_the_relay_hop_needs_the_token_and_a_relay() -> None:
    refused = await probe(closed_port_url(), "token")
    assert len(refused) == 1
    assert not refused[0].ok
    assert "no relay answers" in refused[0].detail
    async with serve(Relay(RelayConfig(closed_port_url()), report=lambda _: None)) as url:
        [hop] = await probe(url, "not-the-token")
    assert hop.status == 401
    assert "--token-file" in hop.detail


async def test_a_gateway_that_is_down_fails_its_hop() -> None:
    gateway = closed_port_url()
    relay = Relay(RelayConfig(gateway), report=lambda _: None)
    async with serve(relay) as url:
        hops = await probe(url, relay.config.token)
    assert [hop.ok for hop in hops] == [True, False]
    assert "does not answer" in hops[1].detail


async def test_the_command_exits_1_on_a_failed_hop_and_says_each(
    redis: Redis, tmp_path: Path
) -> None:
    token_file = tmp_path / "relay.token"
    async with chain(redis) as (relay, url):
        token_file.write_text(relay.config.token)
        process = await asyncio.create_subprocess_exec(
            TOOLREF,
            "doctor",
            "--relay",
            url,
            "--token-file",
            str(token_file),
            env=clean_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    said = out.decode()
    assert process.returncode == 1  # `down` fails
    lines = said.splitlines()
    assert len(lines) == 7  # six hops and the verdict
    assert lines[-1] == "toolref doctor: a hop failed (above)"
    assert any("upstream down" in line and "FAILED  502" in line for line in lines)
    assert any("upstream scripted" in line and "ok      200" in line for line in lines)
    assert " ms  " in lines[0]
    assert relay.config.token not in said
    assert KEY not in said


async def test_a_proxy_of_the_environment_is_not_the_way_to_relay_or_gateway(
    redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: doctor and the relay's gateway check used httpx clients, which read
    HTTP_PROXY and friends, while every turn goes straight to the gateway: with a proxy
    set (and loopback not in NO_PROXY) the relay said a gateway that was up "does not
    answer", and doctor that no relay answered."""
    proxy = closed_port_url()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with chain(redis) as (relay, url):
        hops = by_name(await probe(url, relay.config.token))
    assert hops[f"relay {url}"].ok
    assert hops[f"gateway {relay.config.gateway}"].ok
    assert hops["key"].ok
    assert hops["upstream scripted"].ok
