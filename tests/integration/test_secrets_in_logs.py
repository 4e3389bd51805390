"""No secret in any log line, at any level, nor in any line printed.

The service is started with secrets where an operator puts them: a Redis URL with a
password (an engine whose ACL wants it, so the password is really used), upstream base URLs
with credentials (sent on as `Authorization: Basic`, so they are used too), API keys. Its
start path runs in process with every log record captured at DEBUG (ours and every
library's: redis, httpx, httpcore, uvicorn), and as `toolref-server serve --config` with
every line it prints. Neither may hold a secret: not the password, not the user, not the
Basic header they make. Before: the Redis URL was logged whole at INFO on start, an upstream
URL refused at start was echoed with its `?key=`, and a config file holding secrets at mode
0644 started without a word.

The start log lists the upstreams, name -> base URL, credentials masked.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.processes import ROOT, Process, clean_env
from tests.support.servers import serve
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine, free_port, valkey_server_binary
from toolref_server.http.auth import hash_key
from toolref_server.logs import JsonFormatter
from toolref_server.settings import Settings

from ..conftest import need

REDIS_USER, REDIS_PASSWORD = "tester", "redis-PW-4d1c"
UP_USER, UP_PASSWORD = "upuser-5e2a", "upstream-PW-9b7f"
QUERY_KEY = "query-KEY-33aa"
KEY = "trk_secret-test-key-7c0e"
BASIC = base64.b64encode(f"{UP_USER}:{UP_PASSWORD}".encode()).decode()
SECRETS = (REDIS_PASSWORD, UP_USER, UP_PASSWORD, QUERY_KEY, KEY, BASIC)
MASKED = "[redacted]"
INVOCATION = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n"}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EmbeddedEngine]:
    """A private engine whose ACL has a user with a password (the default user stays open
    for the engine's own readiness probe)."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    started = EmbeddedEngine(
        tmp_path / "engine",
        config={
            "appendonly": "no",
            "user": f"{REDIS_USER} on >{REDIS_PASSWORD} ~* &* +@all",
        },
    )
    started.start()
    yield started
    started.stop()


def redis_url(engine: EmbeddedEngine) -> str:
    return f"redis://{REDIS_USER}:{REDIS_PASSWORD}@127.0.0.1:{engine.tcp_port}"


def upstream_app(seen: list[str | None]) -> Starlette:
    """An upstream that answers 200 to the credentials its base URL carries, 401 else."""

    async def answer(request: Request) -> Response:
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != f"Basic {BASIC}":
            return JSONResponse({"error": "who are you"}, status_code=401)
        return JSONResponse({"data": []})

    return Starlette(routes=[Route("/{path:path}", answer, methods=["GET", "POST"])])


def with_credentials(url: str) -> str:
    return url.replace("http://", f"http://{UP_USER}:{UP_PASSWORD}@")


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def subprocess_run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A command run to its end, every line it printed kept."""
    return subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


async def test_the_start_path_logs_no_secret_at_debug(
    engine: EmbeddedEngine, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []
    caplog.set_level(logging.DEBUG)  # every logger, every level
    async with serve(upstream_app(seen)) as upstream:
        settings = Settings(
            redis_url=redis_url(engine),
            upstreams=f"up={with_credentials(upstream)}/base,"
            f"down={with_credentials('http://127.0.0.1:9')}",
            api_keys=f"acme={hash_key(KEY)}",
            log_level="debug",
        )
        app = create_app(settings)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://toolref.test"
            ) as client,
        ):
            forwarded = await client.get("/llm/up/v1/models", headers={"Toolref-Key": KEY})
            unreachable = await client.get("/llm/down/v1/models", headers={"Toolref-Key": KEY})
            refused = await client.get("/llm/up/v1/models", headers={"Toolref-Key": "trk_no"})
            stored = await client.post(
                "/v1/invocations",
                json={"invocations": [INVOCATION]},
                headers={"Authorization": f"Bearer {KEY}", "Toolref-Protocol": "2"},
            )
    # The secrets were used: the engine took the password, the upstream its credentials.
    assert stored.status_code == 200, stored.text
    assert forwarded.status_code == 200, forwarded.text
    assert seen == [f"Basic {BASIC}"]
    assert unreachable.status_code == 502
    assert refused.status_code == 401
    for answer in (forwarded, unreachable, refused, stored):
        assert not leaks(answer.text), answer.text
    # ... and no record holds one: its message, its arguments, its extras, its traceback,
    # nor the line the service's formatter writes of it.
    formatter = JsonFormatter()
    records = caplog.records
    assert len(records) > 10
    for record in records:
        text = "\n".join(
            (
                record.getMessage(),
                repr(record.args),
                repr(record.__dict__),
                record.exc_text or "",
                formatter.format(record),
            )
        )
        assert not leaks(text), (record.name, record.levelname, text)
    messages = [record.getMessage() for record in records]
    assert f"store: redis://{MASKED}@127.0.0.1:{engine.tcp_port}" in messages
    host = upstream.removeprefix("http://")
    assert (
        f"gateway upstreams: down -> http://{MASKED}@127.0.0.1:9, up -> http://{MASKED}@{host}/base"
    ) in messages


async def test_serve_prints_no_secret_and_warns_of_a_config_file_others_can_read(
    engine: EmbeddedEngine, tmp_path: Path
) -> None:
    seen: list[str | None] = []
    async with serve(upstream_app(seen)) as upstream:
        config = tmp_path / "toolref.toml"
        config.write_text(
            f'[store]\nredis_url = "{redis_url(engine)}"\n'
            f'[access]\napi_keys = "acme={hash_key(KEY)}"\n'
            f'[gateway.upstreams]\nup = "{with_credentials(upstream)}/base"\n'
        )
        config.chmod(0o644)
        port = free_port()
        args = [sys.executable, "-m", "toolref_server.cli", "serve", "--config", str(config)]
        args += ["--port", str(port), "--data-dir", str(tmp_path / "unused")]
        service = await asyncio.to_thread(
            Process,
            args,
            f"http://127.0.0.1:{port}",
            "/readyz",
            clean_env(TOOLREF_LOG_LEVEL="debug"),
        )
        try:
            async with httpx.AsyncClient(base_url=service.url) as client:
                forwarded = await client.get("/llm/up/v1/models", headers={"Toolref-Key": KEY})
                refused = await client.get("/llm/up/v1/models", headers={"Toolref-Key": "x"})
                stored = await client.post(
                    "/v1/invocations",
                    json={"invocations": [INVOCATION]},
                    headers={"Authorization": f"Bearer {KEY}", "Toolref-Protocol": "2"},
                )
            await asyncio.to_thread(service.interrupt)  # its lines on stopping too
            output = service.output()
        finally:
            await asyncio.to_thread(service.stop)
    assert (forwarded.status_code, refused.status_code, stored.status_code) == (200, 401, 200)
    assert seen == [f"Basic {BASIC}"]
    assert not leaks(output), output
    assert '"level": "debug"' in output  # every level was written
    # The start log lists the upstreams, and the store, credentials masked.
    host = upstream.removeprefix("http://")
    assert f"gateway upstreams: up -> http://{MASKED}@{host}/base" in output
    assert f"store: redis://{MASKED}@127.0.0.1:{engine.tcp_port}" in output
    # The config file others can read is named, with its mode and the fix.
    warning = next(line for line in output.splitlines() if "holds secrets" in line)
    assert '"level": "warning"' in warning
    assert f"the config file '{config}' holds secrets" in warning
    assert "redis_url (credentials in a URL)" in warning
    assert "api_keys (API key hashes)" in warning
    assert "upstreams (credentials in a URL)" in warning
    assert "(mode 0644)" in warning
    assert f"chmod 600 {config}" in warning


def test_an_upstream_refused_at_start_is_named_without_its_key(tmp_path: Path) -> None:
    refused = subprocess_run(
        [sys.executable, "-m", "toolref_server.cli", "serve", "--port", "0"],
        clean_env(
            TOOLREF_UPSTREAMS=f"gemini=https://generativelanguage.googleapis.com/v1beta?key={QUERY_KEY}",
            TOOLREF_DATA_DIR=str(tmp_path / "data"),
        ),
    )
    assert refused.returncode == 2
    output = refused.stdout + refused.stderr
    assert not leaks(output), output
    assert f"?key={MASKED}" in output
    assert "TOOLREF_UPSTREAMS gives 'gemini' the base URL" in output
    assert "no query" in output  # the fix


async def test_the_relay_prints_no_credential_of_its_gateway_url() -> None:
    """`--gateway` with credentials (a gateway behind a proxy that wants them) that does
    not answer: the relay's start stops saying so, and started anyway
    (`--no-gateway-check`) its 502 to an agent says so, each naming the URL without
    them."""
    gateway = f"http://{UP_USER}:{UP_PASSWORD}@127.0.0.1:{free_port()}"
    port = free_port()
    args = [sys.executable, "-m", "toolref_relay.cli", "relay", "--gateway", gateway]
    args += ["--port", str(port), "--log-level", "debug"]
    stopped = await asyncio.to_thread(
        subprocess.run,
        args,
        env=clean_env(TOOLREF_KEY=KEY),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stopped.returncode == 1, stopped
    said = stopped.stdout + stopped.stderr
    assert not leaks(said), said
    assert f"http://{MASKED}@127.0.0.1:" in said, said
    args.append("--no-gateway-check")
    # Ready once it serves: /metrics without the start's token is 401.
    relay = await asyncio.to_thread(
        Process, args, f"http://127.0.0.1:{port}", "/metrics", clean_env(TOOLREF_KEY=KEY), 401
    )
    try:
        async with httpx.AsyncClient(base_url=relay.url) as client:
            failed = await client.post(
                "/llm/anthropic/v1/messages",
                json={
                    "model": "m",
                    "max_tokens": 1,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                headers={"x-api-key": "sk-ant-x", "anthropic-version": "2023-06-01"},
            )
        await asyncio.to_thread(relay.interrupt)
        output = relay.output()
    finally:
        await asyncio.to_thread(relay.stop)
    assert failed.status_code == 502, failed.text
    masked = f"http://{MASKED}@127.0.0.1:"
    for text in (output, failed.text):
        assert not leaks(text), text
        assert masked in text, text
