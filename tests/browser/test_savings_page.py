"""The savings page in a real browser: Debian's Chromium, headless, driven by playwright-core
(tests/browser/savings/page.mjs), against a real `toolref-server serve --workers 2`.

Two tenants talk through two upstreams of the gateway (the official SDKs on
`toolref.AsyncTransport`, the scripted provider of examples/llm_backend.py); one of them
has its recipes evicted mid-conversation, so one of its requests is resent. Then an operator
opens `/`: the page asks for the metrics key (the key itself, not the SHA-256 that
TOOLREF_METRICS_KEY holds), refuses a wrong one, and with the right one shows, per tenant
and upstream and for the last hour and day, exactly what `/metrics` counted over both
workers: in its tables, in bars labelled with their values on one linear axis from 0, and
per minute over each window, for all tenants and upstreams and for each (every mark in the
minutes the traffic ran, adding up to what was counted, as tall as its value on the axis).
The screenshot it takes is docs/savings-page.png (`make savings-page` copies it there).

Needs node, /usr/bin/chromium and tests/browser/savings/node_modules (`make browser-test`
installs them); their absence skips locally, saying why, and fails under CI=true.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import shutil
import time
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


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}  # binary, as the relay prints
FIELDS = {"raw": "rawBytes", "wire": "wireBytes", "requests": "requests"}


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def as_bytes(shown: str) -> float:
    """`238.2 KiB` as bytes; a label without its unit fails here."""
    number, unit = shown.split(" ")
    return float(number) * UNITS[unit]


def minute() -> int:
    return int(time.time() // 60)


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
    """acme: an OpenAI chat (its recipes evicted before its third request: a resend) and an
    Anthropic one; globex: an Anthropic chat."""
    engine = Redis.from_url(service.engine_url)
    calls = 0

    async def evict_before_the_third_request(request: httpx2.Request) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            recipes = [n for n in await key_names(engine) if n.split(":")[2] in "bkp"]
            await engine.delete(*recipes)

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
async def served(tmp_path: Path) -> AsyncIterator[tuple[Service, Usage, range]]:
    async with serve(create_backend(None, delay=0.001)) as provider:
        service = Service(
            tmp_path / "data",
            free_port(),
            TOOLREF_WORKERS="2",
            TOOLREF_SAMPLE_SECONDS="0.5",
            TOOLREF_UPSTREAMS=f"openai={provider},anthropic={provider}",
            TOOLREF_API_KEYS=",".join(f"{t}={digest(k)}" for t, k in KEYS.items()),
            TOOLREF_METRICS_KEY=digest(SCRAPER),
            TOOLREF_EDIT_CACHE_BYTES="0",  # the store decides what is held: evictions felt
        )
        try:
            first = minute()
            await traffic(service)
            ran = range(first, minute() + 1)  # the minutes the traffic ran in
            yield service, await settled(service.url), ran
        finally:
            service.stop()


async def test_the_page_shows_what_the_metrics_counted(
    artifacts: Path, served: tuple[Service, Usage, range]
) -> None:
    service, metrics, ran = served
    record = await browse(service.url, artifacts)
    assert record["landedOn"] == "/savings"  # `/` points to the page
    # Its own script and style run, by their hashes: nothing inline that is not them.
    assert "script-src 'sha256-" in record["csp"]
    assert "unsafe-inline" not in record["csp"]
    assert record["askedFirst"]
    # The key itself, not what the setting holds.
    assert "Enter the metrics key itself" in record["askText"]
    assert "TOOLREF_METRICS_KEY holds that key's SHA-256, not the key" in record["askText"]
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
        bars_hold_their_values(window["bars"], metrics)
    over_time_is_the_traffic_made(record["overTime"], metrics, ran)
    # Nothing moved while the page was read: /metrics still says the same.
    async with httpx.AsyncClient(base_url=service.url) as client:
        assert await from_metrics(client, SCRAPER) == metrics
    assert SHOT.stat().st_size > 10_000


def bars_hold_their_values(bars: dict[str, Any], metrics: Usage) -> None:
    """A bar for raw and wire bytes of each tenant and upstream, as long as its value on one
    linear axis from 0, labelled with its value and unit."""
    top, plot = float(bars["max"]), float(bars["plotWidth"])
    marks = {(m["tenant"], m["upstream"], m["kind"]): m for m in bars["marks"]}
    assert set(marks) == {(*pair, kind) for pair in metrics for kind in ("raw", "wire")}
    for (tenant, upstream, kind), mark in marks.items():
        assert mark["value"] == metrics[(tenant, upstream)][FIELDS[kind]]
        assert mark["width"] == pytest.approx(plot * mark["value"] / top)
    labels = {(t["tenant"], t["upstream"], t["kind"]): t["text"] for t in bars["labels"]}
    assert set(labels) == set(marks)
    for key, text in labels.items():
        assert as_bytes(text) == pytest.approx(marks[key]["value"], rel=0.006), text
    ticks = [round(as_bytes(text)) for text in bars["ticks"]]
    steps = {b - a for a, b in itertools.pairwise(ticks)}
    assert ticks[0] == 0
    assert len(steps) == 1  # evenly spaced: a linear axis
    assert ticks[-1] == top >= max(m["value"] for m in marks.values())
    assert [text.split(":")[0] for text in bars["legend"]] == ["raw", "wire"]


def over_time_is_the_traffic_made(views: list[dict[str, Any]], metrics: Usage, ran: range) -> None:
    """For each window and each choice (all tenants and upstreams, then each), per minute:
    marks only in the minutes the traffic ran, one per minute and kind, adding up to what was
    counted, each as tall as its value on a linear axis from 0; ticks and axis labelled."""
    everything = {field: sum(m[field] for m in metrics.values()) for field in FIELDS.values()}
    expected = {"all tenants and upstreams": everything}
    expected |= {f"{t} · {u}": counts for (t, u), counts in sorted(metrics.items())}
    seen = [(view["span"], view["choice"]) for view in views]
    assert seen == [(span, choice) for span in ("hour", "day") for choice in expected]
    for view in views:
        counted = expected[view["choice"]]
        assert f"{counted['requests']} requests" in view["summary"], view["summary"]
        bytes_panel, requests_panel = view["panels"]
        for panel, kinds in ((bytes_panel, ("raw", "wire")), (requests_panel, ("requests",))):
            first, last = int(panel["from"]), int(panel["to"])
            assert panel["window"] == view["span"]
            assert last - first + 1 == {"hour": 60, "day": 1440}[view["span"]]
            assert {m["kind"] for m in panel["marks"]} == set(kinds)
            for kind in kinds:
                marks = [m for m in panel["marks"] if m["kind"] == kind]
                minutes = [m["minute"] for m in marks]
                assert len(set(minutes)) == len(minutes)
                assert set(minutes) <= set(ran) & set(range(first, last + 1)), minutes
                assert sum(m["value"] for m in marks) == counted[FIELDS[kind]], (view, kind)
            top, tall = float(panel["max"]), float(panel["plotHeight"])
            for mark in panel["marks"]:
                assert mark["value"] > 0
                assert mark["height"] == pytest.approx(tall * mark["value"] / top)
                assert re.fullmatch(r"\d\d:\d\d UTC: \w+ .+", mark["tip"]), mark["tip"]
            assert panel["axis"] == ["minute (UTC)"]
            assert any(re.fullmatch(r"\d\d:\d\d", tick) for tick in panel["ticks"])
            assert panel["ticks"][0] in ("0", "0 B")
        assert "bytes per minute" in bytes_panel["title"]
        assert "requests per minute" in requests_panel["title"]
