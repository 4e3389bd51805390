"""Context editing's pinned stand-ins through `toolref-server cache export` and `import`.

Found: a stand-in is kept as a summary whose summarizer id is `stand-in:<summarizer>:
<chars>`, and import held its text to `<chars>`; but a stand-in holds a head (the tool, how
it was called, its result's size) beside its summary, as the JSON text of a result, so
every stand-in context editing kept was refused, and with it the whole file. Now an export
of them imports, and a replica reading the imported store sends them byte for byte.
"""

from __future__ import annotations

import io
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis

from tests.support.servers import serve_all
from toolref_server import export
from toolref_server.app import create_app
from toolref_server.context import facts as facts_module
from toolref_server.settings import Settings

from ..adversarial.test_import_verify import sync
from ..conftest import ON_CLUSTER, snapshot
from .test_context_editing import PATHS, POLICY, Upstream, body_of, conversation

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(ON_CLUSTER, reason="exports through one engine"),
]


def summaries(held: dict[Any, Any]) -> dict[Any, Any]:
    """The summaries (stand-ins among them) of a snapshot: what an export carries of them."""
    return {k: v for k, v in held.items() if k.decode().split(":")[2] == "s"}


@pytest.mark.parametrize("fmt", list(PATHS))
async def test_stand_ins_context_editing_kept_import_and_are_sent_the_same(
    redis: Redis, engine_url: str, fmt: str
) -> None:
    upstream = Upstream()
    body = body_of(fmt, conversation(fmt, 12))
    path = "/llm/up" + PATHS[fmt]
    async with serve_all(upstream.app()) as [upstream_url]:
        common = {"redis_url": "unused", "upstreams": f"up={upstream_url}", **POLICY}
        first = create_app(Settings(**common), redis=redis)
        # whose own summaries of the same results differ (tool kinds), as another's would
        second = create_app(Settings(**common, tool_kinds="read=shell"), redis=redis)
        async with (
            serve_all(first, second) as [one, two],
            httpx.AsyncClient(timeout=30) as client,
        ):
            facts_module.forget()
            assert (await client.post(one + path, content=body)).status_code == 200
            before = summaries(await snapshot(redis))
            pinned = {k: v for k, v in before.items() if b":stand-in:" in k}
            assert pinned, "context editing kept no stand-in"
            texts = [cast(bytes, await redis.get(key)).decode() for key in pinned]
            assert all(len(text) > 200 for text in texts), texts  # beyond their chars
            with sync(engine_url) as source:
                out = io.BytesIO()
                count = export.export(source, out, "local")
            assert count >= len(before)
            await redis.flushall()
            with sync(engine_url) as target:
                assert export.import_(target, io.BytesIO(out.getvalue())) == (count, 0)
            assert summaries(await snapshot(redis)) == before
            facts_module.forget()  # the second replica has nothing but the imported store
            assert (await client.post(two + path, content=body)).status_code == 200
    assert b"[toolref:" in upstream.bodies[0]
    assert upstream.bodies[1] == upstream.bodies[0]
