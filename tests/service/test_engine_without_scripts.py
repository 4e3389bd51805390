"""An engine that refuses Lua scripts to the service's user (a managed Redis's ACL, scripting
turned off): refs still resolve, through MGET and EXPIRE (`storage.scripting`, the rule the
usage counters share)."""

from __future__ import annotations

import httpx
import pytest
from redis.asyncio import Redis

from tests.service.no_scripts import no_scripts
from tests.service.test_invocations import READ, register
from toolref_server.app import create_app
from toolref_server.settings import Settings

pytestmark = pytest.mark.engine


async def test_refs_resolve_where_the_acl_refuses_eval(engine_url: str, redis: Redis) -> None:
    async with no_scripts(engine_url, redis, "toolref-no-eval") as limited:
        app = create_app(Settings(redis_url="unused"), redis=limited)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 123)),
                base_url="http://localhost:8750",
                headers={"Toolref-Protocol": "2"},
            ) as api,
        ):
            [read] = await register(api, READ)
            for _ in range(2):  # the first finds the script refused, the second does not try
                response = await api.post("/v1/invocations:resolve", json={"refs": [read["ref"]]})
                assert response.status_code == 200, response.text
                assert response.json()["invocations"][read["ref"]]["result"] == READ["result"]
