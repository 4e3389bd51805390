"""The savings page in a real browser: Debian's Chromium, headless, driven by playwright-core
(tests/browser/savings/page.mjs), against a real `toolref-server serve --workers 2`.

Two tenants talk through two upstreams of the gateway (the official SDKs on
`toolref.AsyncTransport`, the scripted provider of examples/llm_backend.py); one of them
loses its history mid-conversation, so some of its requests are resent. Then an operator
opens `/`: the page asks for the metrics key, refuses a wrong one, and with the right one
shows, per tenant and upstream and for the last hour and day, exactly what `/metrics` counted
over both workers. The screenshot it takes is docs/savings-page.png (`make savings-page`
copies it there).

Needs node, /usr/bin/chromium and tests/browser/savings/node_modules (`make browser-test`
installs them); their absence skips locally, saying why, and fails under CI=true.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from examples import anthropic_client, openai_client
from examples.llm_backend import create_backend
from redis.asyncio import Redis

from tests.conftest import key_names, need
from tests.gateway_usage import Usage, anthropic_turns, from_metrics, from_savings, openai_turns
from tests.support.processes import ROOT, Service
from tests.support.servers import serve
from toolref_server.embedded import free_port

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).parent / "savings" / "page.mjs"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / ".toolref" / "browser-savings"  # its own: test_web_chat empties browser-test
SHOT = ARTIFACTS / "savings-page.png"
KEYS = {"acme": "acme-key-0001", "globex": "globex-key-0002"}
SCRAPER = "scraper-key-0003"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not on PATH: install Node.js 20+ (apt-get install -y nodejs npm)"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: apt-get install -y chromium"
    if not (DRIVER.parent / "node_modules" / "playwright-core").is_dir():
        return f"{DRIVER.parent}/node_modules is missing: make browser-test (npm ci there)"
    return None


async def settled(url: str) -> Usage:
    """/metrics once the store's counters hold the same (every worker flushed: at most
    TOOLREF_SAMPLE_SECONDS)."""
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(100):
            metrics = await from_metrics(client, SCRAPER)
            if (await from_savings(client, SCRAPER))["day"] == metrics:
                return metrics
            await asyncio.sleep(0.1)
    raise AssertionError("the savings data never caught up with /metrics")


@pytest.fixture(scope="module")
def artifacts() -> Path:
    lacking = missing()
    if lacking:
        need(lacking)
    shutil.rmtree(ARTIFACTS / "savings", ignore_errors=True)
    (ARTIFACTS / "savings").mkdir(parents=True)
    return ARTIFACTS / "savings"


async def traffic(service: Service) -> None:
    """acme: an OpenAI chat (its histories evicted before its third request: resends) and an
    Anthropic one; globex: an Anthropic chat."""
    engine = Redis.from_url(service.engine_url)
    calls = 0

    async def evict_before_the_third_request(request: httpx2.Request) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            held = [n for n in await key_names(engine) if ":h:" in n or ":i:" in n]
            await engine.delete(*held)

    try:
        gateway = service.url + "/llm/"
        await openai_turns(
            gateway + "openai", KEYS["acme"], openai_client.TASKS, evict_before_the_third_request
        )
        await anthropic_turns(gateway + "anthropic", KEYS["acme"], anthropic_client.TASKS[:2])
        await anthropic_turns(gateway + "anthropic", KEYS["globex"], anthropic_client.TASKS)
    finally:
        await engine.aclose()


async def browse(url: str, out: Path) -> dict[str, Any]:
    args = ["node", str(DRIVER), "--url", url, "--key", SCRAPER, "--wrong", "not-the-key"]
    args += ["--out", str(out / "page.json"), "--shot", str(SHOT), "--chromium", str(CHROMIUM)]
    driver = await asyncio.create_subprocess_exec(
        *args, cwd=DRIVER.parent, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(driver.communicate(), 120)
    assert driver.returncode == 0, (stdout + stderr).decode(errors="replace")
    record: dict[str, Any] = json.loads((out / "page.json").read_text())
    return record


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Service, Usage]]:
    async with serve(create_backend(None, delay=0.001)) as provider:
        service = Service(
            tmp_path / "data",
            free_port(),
            TOOLREF_WORKERS="2",
            TOOLREF_SAMPLE_SECONDS="0.5",
            TOOLREF_UPSTREAMS=f"openai={provider},anthropic={provider}",
            TOOLREF_API_KEYS=",".join(f"{t}={digest(k)}" for t, k in KEYS.items()),
            TOOLREF_METRICS_KEY=digest(SCRAPER),
        )
        try:
            await traffic(service)
            yield service, await settled(service.url)
        finally:
            service.stop()


async def test_the_page_shows_what_the_metrics_counted(
    artifacts: Path, served: tuple[Service, Usage]
) -> None:
    service, metrics = served
    record = await browse(service.url, artifacts)
    assert record["landedOn"] == "/savings"  # `/` points to the page
    assert "script-src 'unsafe-inline'" in record["csp"]
    assert record["askedFirst"]
    assert record["refused"] == "That is not this service's metrics key."
    assert record["pageErrors"] == []
    # The browser logs the two 401s (no key, then the wrong one); nothing else (a CSP
    # violation would show here).
    refused = "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    assert record["consoleErrors"] == [refused, refused]
    assert record["keyStored"]
    assert [(w["name"], w["title"]) for w in record["windows"]] == [
        ("hour", "Last hour"),
        ("day", "Last day"),
    ]
    assert set(metrics) == {("acme", "openai"), ("acme", "anthropic"), ("globex", "anthropic")}
    assert metrics[("acme", "openai")]["resends"] > 0
    for window in record["windows"]:
        shown = {
            (r["tenant"], r["upstream"]): {
                field: r[field] for field in ("requests", "resends", "rawBytes", "wireBytes")
            }
            for r in window["rows"]
        }
        assert shown == metrics, window["name"]
        for row in window["rows"]:
            assert row["saved"] == row["rawBytes"] - row["wireBytes"]
    # Nothing moved while the page was read: /metrics still says the same.
    async with httpx.AsyncClient(base_url=service.url) as client:
        assert await from_metrics(client, SCRAPER) == metrics
    assert SHOT.stat().st_size > 10_000
