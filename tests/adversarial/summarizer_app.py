"""The app under test with its openai-compatible summarizer pointed at the raw fake
provider (`tests.support.fake_provider.raw`), over its real socket; and the invocations
the LLM tests summarize."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette

from tests.support.fake_provider.raw import MODEL, RawProvider
from toolref_server.app import create_app
from toolref_server.services import Services
from toolref_server.settings import Settings

LLM = "openai-compatible"
LINES = "".join(f"line {i:04d}\n" for i in range(300))
READ = {"name": "read_file", "args": {"path": "src/app.py"}, "result": LINES}


def llm_id(max_chars: int) -> str:
    return f"{LLM}:{MODEL}:v1:{max_chars}"


@dataclass
class App:
    app: Starlette
    http: httpx.AsyncClient

    @property
    def services(self) -> Services:
        found: Services = self.app.state.services
        return found

    async def register(self, invocation: dict[str, Any]) -> str:
        response = await self.http.post("/v1/invocations", json={"invocations": [invocation]})
        assert response.status_code == 200, response.text
        ref: str = response.json()["refs"][0]["ref"]
        return ref

    async def summary(self, ref: str, max_chars: int = 200) -> dict[str, Any]:
        response = await self.http.get(
            f"/v1/invocations/{ref}/summary", params={"summarizer": LLM, "maxChars": max_chars}
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


Build = Callable[..., Awaitable[App]]


@asynccontextmanager
async def apps(redis: Redis) -> AsyncIterator[Build]:
    """Builds the app on the test engine with the openai-compatible summarizer pointed at a
    raw fake provider (over its real socket), lifespan run; all closed together at the end."""
    async with AsyncExitStack() as stack:

        async def build(
            llm: RawProvider, headers: dict[str, str] | None = None, **settings: Any
        ) -> App:
            config = Settings(
                **{
                    "redis_url": "unused",
                    "llm_base_url": llm.url,
                    "llm_model": MODEL,
                    "llm_input_chars": 1000,
                    **settings,
                }
            )
            app = create_app(config, redis=redis)
            await stack.enter_async_context(app.router.lifespan_context(app))
            http = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                # A loopback name, as on the service's own machine: without a metrics key,
                # /metrics and /v1/savings answer no other Host (DNS rebinding).
                base_url="http://localhost:8750",
                headers={"Toolref-Protocol": "2", **(headers or {})},
                timeout=60,
            )
            await stack.enter_async_context(http)
            return App(app, http)

        yield build


def invocation(n: int, result: str = LINES) -> dict[str, Any]:
    """A distinct read of `src/module_{n}.py`."""
    return {"name": f"read_{n}", "args": {"path": f"src/module_{n}.py"}, "result": result}
