"""An engine that answers but refuses the credentials of TOOLREF_REDIS_URL (a wrong
password, an ACL user without PING: NOPERM) is named as such, not as one that is down: by
`/readyz`, once by the start log (a warning), in the detail of a 503 store-unavailable,
and by `toolref-server cache export/import`; the password never shown."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis import Redis

from tests.support.processes import ROOT, Process, clean_env
from toolref_server.app import create_app
from toolref_server.embedded import EmbeddedEngine, free_port, valkey_server_binary
from toolref_server.settings import Settings

from ..conftest import need

USER, PASSWORD, WRONG = "tester", "redis-PW-81c3", "wrong-PW-5f0e"
NO_PING, NO_PING_PASSWORD = "noping", "noping-PW-2a7d"
REFUSED = "TOOLREF_REDIS_URL's credentials were refused by the engine ("
FIX = "fix the user or password in the URL"
MASKED = "[redacted]"
INVOCATION = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n"}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EmbeddedEngine]:
    """A private engine with a user and its password, and a user who may not PING (the
    default user stays open for the engine's own readiness probe)."""
    try:
        valkey_server_binary()
    except Exception as exc:
        need(f"no valkey-server binary: {exc}")
    started = EmbeddedEngine(
        tmp_path / "engine",
        config={
            "appendonly": "no",
            "user": f"{USER} on >{PASSWORD} ~* &* +@all",
        },
    )
    default = Redis.from_url(started.start())  # the open default user, on its socket
    try:
        rules = ("on", f">{NO_PING_PASSWORD}", "~*", "&*", "+@all", "-ping")
        default.execute_command("ACL", "SETUSER", NO_PING, *rules)  # type: ignore[no-untyped-call]
    finally:
        default.close()
    yield started
    started.stop()


def url(engine: EmbeddedEngine, user: str = USER, password: str = WRONG) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{engine.tcp_port}"


async def _until_logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """The start's check runs beside the first requests: wait for its line (bounded)."""
    for _ in range(200):
        if any(text in record.getMessage() for record in caplog.records):
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("user", "password", "said", "kind"),
    [
        (USER, WRONG, "invalid username-password pair", "the user or password is wrong"),
        (NO_PING, NO_PING_PASSWORD, "no permissions to run the 'ping' command", "NOPERM"),
    ],
    ids=["wrong-password", "noperm"],
)
async def test_readyz_and_the_start_log_name_refused_credentials(
    engine: EmbeddedEngine,
    caplog: pytest.LogCaptureFixture,
    user: str,
    password: str,
    said: str,
    kind: str,
) -> None:
    """`/readyz` (no key needed) and a request's 503 name the refusal's kind and the fix,
    never the engine's words (they name the ACL user and the command); the start log, the
    operator's, says those words once."""
    caplog.set_level(logging.INFO)
    app = create_app(Settings(redis_url=url(engine, user, password)))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        ready = await client.get("/readyz")
        stored = await client.post(
            "/v1/invocations",
            json={"invocations": [INVOCATION]},
            headers={"Toolref-Protocol": "2"},
        )
        await _until_logged(caplog, REFUSED)
    assert ready.status_code == 503, ready.text
    detail = ready.json()["detail"]
    for part in (REFUSED, kind, FIX):
        assert part in detail, detail
    assert said not in detail
    assert user not in detail
    assert "PING" not in detail.replace("'ping'", "")  # not "does not answer PING"
    assert password not in ready.text
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and REFUSED in r.getMessage()
    ]
    assert len(warnings) == 1, warnings  # once, at start
    assert said in warnings[0]
    assert FIX in warnings[0]
    if user == USER:  # every command refused: the 503 of a request says why
        assert stored.status_code == 503, stored.text
        assert stored.json()["type"].endswith("store-unavailable")
        problem = stored.json()["detail"]
        for part in (REFUSED, kind, FIX):
            assert part in problem, problem
        assert "unreachable" not in problem
    for record in caplog.records:
        assert password not in record.getMessage()


async def test_serve_names_refused_credentials_at_start_and_in_readyz(
    engine: EmbeddedEngine, tmp_path: Path
) -> None:
    port = free_port()
    args = [sys.executable, "-m", "toolref_server.cli", "serve", "--port", str(port)]
    args += ["--redis-url", url(engine), "--data-dir", str(tmp_path / "unused")]
    service = await asyncio.to_thread(
        Process, args, f"http://127.0.0.1:{port}", "/readyz", clean_env(), 503
    )
    try:
        async with httpx.AsyncClient(base_url=service.url) as client:
            ready = await client.get("/readyz")
        for _ in range(200):  # the start's check: its line, bounded
            if REFUSED in service.output():
                break
            await asyncio.sleep(0.01)
        await asyncio.to_thread(service.interrupt)
        output = service.output()
    finally:
        await asyncio.to_thread(service.stop)
    assert ready.status_code == 503
    assert REFUSED in ready.json()["detail"], ready.text
    assert "the user or password is wrong" in ready.json()["detail"]
    started = [line for line in output.splitlines() if REFUSED in line]
    assert len(started) == 1, output
    assert '"level": "warning"' in started[0]
    assert WRONG not in output


def _cache(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "toolref_server.cli", "cache", *args]
    return subprocess.run(
        command, env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("action", ["export", "import"])
async def test_cache_says_the_engine_refused_the_credentials(
    engine: EmbeddedEngine, tmp_path: Path, action: str
) -> None:
    # A record to export, then import (an empty file would never reach the engine).
    app = create_app(Settings(redis_url=url(engine, USER, PASSWORD)))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client,
    ):
        stored = await client.post(
            "/v1/invocations",
            json={"invocations": [INVOCATION]},
            headers={"Toolref-Protocol": "2"},
        )
    assert stored.status_code == 200, stored.text
    exported = tmp_path / "cache.tref"
    made = await asyncio.to_thread(
        _cache, "export", str(exported), "--redis-url", url(engine, USER, PASSWORD)
    )
    assert made.returncode == 0, made.stderr
    target = exported if action == "import" else tmp_path / "again.tref"
    refused = await asyncio.to_thread(_cache, action, str(target), "--redis-url", url(engine))
    assert refused.returncode == 2, refused.stderr
    assert "refused the credentials" in refused.stderr, refused.stderr
    assert "invalid username-password pair" in refused.stderr
    assert "unreachable" not in refused.stderr
    assert WRONG not in refused.stderr + refused.stdout
