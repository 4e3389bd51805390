"""toolrefFetch on a page whose chat backend is on another origin (a web chat on
http://localhost:5173, its backend on http://localhost:8000), in a real browser: Debian's
Chromium, headless, driven by playwright-core (tests/browser/cross_origin/page.mjs, which
bundles client_sdk/js/src for the page).

Toolref's offer (`Toolref-Edits`) is a request header the backend's CORS must allow, and its
answers' headers (`Toolref-Edits`, `Toolref-History`, ...) are hidden from the page unless the
backend exposes them. The same conversation goes once with the page's own fetch and once
through toolrefFetch to each backend:

- a Starlette backend (CORSMiddleware outside ToolRefMiddleware) whose CORS allows what the app
  itself needs and knows nothing of toolref: before the fix every toolrefFetch request failed
  (TypeError: Failed to fetch, the preflight refused) where the page's own fetch was answered;
  now each is answered as the page's own fetch is (the offer tried once, then never again);
- Starlette and a JS `withToolRef` backend allowing every request header but exposing none
  (`allow_headers=["*"]`): before, answered as without toolref (the page never saw
  `Toolref-Edits`); now edits from the second request, the receivers exposing their headers;
- Starlette and a JS `withToolRef` backend with the CORS settings docs/js.md gives
  ("Cross-origin pages"): edits from the second request, few bytes on the wire.

Needs node, /usr/bin/chromium and the web-chat demo's node_modules (playwright-core, esbuild:
`make web-build` installs them). Locally their absence skips, saying why; under CI=true it fails.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from examples import web_chat_demo
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.conftest import need
from tests.support.servers import serve, serve_all
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref_server.app import create_app
from toolref_server.embedded import free_port
from toolref_server.settings import Settings

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).parent / "cross_origin" / "page.mjs"
TURNS = 4

# docs/js.md, "Cross-origin pages": what a backend's CORS needs for toolref (the page's origin
# filled in). Starlette's CORSMiddleware, and the same lists for Hono's and Express's cors().
# `Content-Encoding` too: the receivers expose it where an answer has one, and a CORS list of
# its own replaces theirs (hidden, a page's tap reads an encoded answer as a plain one).
ALLOW_HEADERS = ["Content-Type", "Toolref-Edits", "Toolref-Key"]
EXPOSE_HEADERS = [
    "Toolref-Edits",
    "Toolref-History",
    "Toolref-Savings",
    "Toolref-Channel",
    "Content-Encoding",
]


def documented(origin: str) -> dict[str, Any]:
    return {
        "allow_origins": [origin],
        "allow_methods": ["POST"],
        "allow_headers": ALLOW_HEADERS,
        "expose_headers": EXPOSE_HEADERS,
    }


def missing() -> str | None:
    lacking = web_chat_demo.missing()
    if lacking is None and not (web_chat_demo.WEB / "node_modules" / "esbuild").is_dir():
        lacking = f"{web_chat_demo.WEB}/node_modules/esbuild is missing: make web-build"
    return lacking


async def chat(request: Request) -> JSONResponse:
    return JSONResponse({"messages": len((await request.json())["messages"])})


def backend(registry: AsyncRegistryClient, cors: dict[str, Any]) -> Starlette:
    """The app behind ToolRefMiddleware, CORS outside both (as apps add it: last)."""
    app = Starlette(routes=[Route("/api/chat", chat, methods=["POST"])])
    app.add_middleware(ToolRefMiddleware, registry=registry, paths={"/api/chat"})
    app.add_middleware(CORSMiddleware, **cors)
    return app


@pytest.fixture
async def record(redis: Redis, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    lacking = missing()
    if lacking:
        need(lacking)
    page_port = free_port()
    origin = f"http://127.0.0.1:{page_port}"
    configs = {
        # What the app needs (a JSON POST) and nothing of toolref's.
        "app-only": {
            "allow_origins": [origin],
            "allow_methods": ["POST"],
            "allow_headers": ["Content-Type"],
        },
        "all-headers": {"allow_origins": ["*"], "allow_methods": ["*"], "allow_headers": ["*"]},
        "documented": documented(origin),
    }
    service = create_app(Settings(redis_url="unused"), redis=redis)
    async with serve(service) as registry_url:
        registry = AsyncRegistryClient(registry_url, retries=0)
        try:
            apps = [backend(registry, cors) for cors in configs.values()]
            async with serve_all(*apps) as urls:
                plan = {
                    "pagePort": page_port,
                    "registry": registry_url,
                    "turns": TURNS,
                    "backends": {
                        name: url + "/api/chat" for name, url in zip(configs, urls, strict=True)
                    },
                    "jsBackends": {
                        "all-headers-js": {
                            "origin": "*",
                            "allowHeaders": ["*"],
                            "exposeHeaders": [],
                        },
                        "documented-js": {
                            "origin": origin,
                            "allowHeaders": ALLOW_HEADERS,
                            "exposeHeaders": EXPOSE_HEADERS,
                        },
                    },
                }
                (tmp_path / "plan.json").write_text(json.dumps(plan))
                yield await drive(tmp_path)
        finally:
            await registry.aclose()


async def drive(work: Path) -> dict[str, Any]:
    args = ["node", str(DRIVER), "--plan", str(work / "plan.json"), "--out", str(work / "out.json")]
    args += ["--work", str(work), "--modules", str(web_chat_demo.WEB)]
    args += ["--chromium", str(web_chat_demo.CHROMIUM)]
    driver = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(driver.communicate(), 180)
    assert driver.returncode == 0, (stdout + stderr).decode(errors="replace")
    out: dict[str, Any] = json.loads((work / "out.json").read_text())
    return out


def answers(run: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(t["turn"], t.get("status"), t.get("answer"), t.get("error")) for t in run["turns"]]


async def test_a_page_on_another_origin(record: dict[str, Any]) -> None:
    runs = record["runs"]
    for name, run in runs.items():
        plain, toolref = run["plain"], run["toolref"]
        # The page's own fetch is answered by every backend: the app's CORS is right for it.
        assert [t["status"] for t in plain["turns"]] == [200] * TURNS, (name, plain)
        # toolrefFetch never fails a request its own fetch would have had answered.
        assert answers(toolref) == answers(plain), (name, toolref)
        assert toolref["pageErrors"] == [], name

    # CORS knowing nothing of toolref: the offer tried once (refused by the preflight), then
    # every request as the page's own fetch sends it; the SDK says what to allow, once.
    app_only = runs["app-only"]["toolref"]
    offered = [bool(r["headers"].get("toolref-edits")) for r in app_only["requests"]]
    assert offered == [True] + [False] * TURNS, app_only["requests"]
    assert [t["info"]["edit"] for t in app_only["turns"]] == [False] * TURNS
    warned = [line for line in app_only["console"] if line.startswith("toolref:")]
    assert len(warned) == 1, app_only["console"]
    assert "Toolref-Edits" in warned[0]

    # Every request header allowed, none exposed (`allow_headers=["*"]`, the common set-up):
    # the receivers expose the toolref headers each answer carries themselves (before, the
    # page never saw `Toolref-Edits`: every request went whole, nothing said so). Edits from
    # the second request, each against the last one's recipe; no CORS allow header added.
    for name in ("all-headers", "all-headers-js"):
        run = runs[name]["toolref"]
        assert [t["info"]["edit"] for t in run["turns"]] == [False] + [True] * (TURNS - 1), name
        for turn in run["turns"][2:]:
            assert turn["info"]["continued"] is not None, (name, turn)
        assert not [line for line in run["console"] if line.startswith("toolref:")], name

    # The documented settings, Starlette and withToolRef: edits from the second request.
    for name in ("documented", "documented-js"):
        run = runs[name]["toolref"]
        turns = run["turns"]
        assert [t["info"]["edit"] for t in turns] == [False] + [True] * (TURNS - 1), name
        assert turns[-1]["headers"] == ["toolref-edits", "toolref-history", "toolref-savings"]
        for turn in turns[2:]:
            assert turn["info"]["continued"] is not None, (name, turn)
            assert turn["info"]["wireBytes"] * 5 < turn["info"]["rawBytes"], (name, turn)
        assert run["failed"] == [], (name, run["failed"])
        assert not [line for line in run["console"] if line.startswith("toolref:")], name
