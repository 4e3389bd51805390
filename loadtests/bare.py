"""The bare baseline for the service-speed benchmark: a minimal Starlette app that parses
the same bodies with the same JSON parser and runs the same Redis commands, and nothing
else (no validation, canonical form, records, auth or problem handling).

    TOOLREF_REDIS_URL=unix:///path/valkey.sock uvicorn loadtests.bare:app
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

TTL = 86_400


def _json(value: Any) -> Response:
    body = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(body, media_type="application/json")


async def register(request: Request) -> Response:
    """SET NX with a lifetime per invocation, keyed by position and a hash of its JSON."""
    body = json.loads(await request.body())
    redis: Redis = request.app.state.redis
    pipe = redis.pipeline(transaction=False)
    keys = []
    for item in body["invocations"]:
        key = f"bare:{hash(json.dumps(item, sort_keys=True)) & 0xFFFFFFFFFFFF:x}"
        keys.append(key)
        pipe.set(key, json.dumps(item).encode(), nx=True, ex=TTL)
    await pipe.execute()
    return _json({"refs": keys})


async def resolve(request: Request) -> Response:
    """One MGET of the keys, the values parsed and answered."""
    body = json.loads(await request.body())
    redis: Redis = request.app.state.redis
    values = await redis.mget(body["refs"])
    return _json({"invocations": [None if v is None else json.loads(v) for v in values]})


async def hydrate(request: Request) -> Response:
    """Parse the conversation, one MGET of its keys, answer the conversation and the values
    (spliced in as stored: as many bytes go back as the service's filled conversation)."""
    body = json.loads(await request.body())
    redis: Redis = request.app.state.redis
    values = await redis.mget(body["keys"])
    messages = json.dumps(body["messages"], separators=(",", ":"), ensure_ascii=False).encode()
    stored = b",".join(
        b"null" if v is None else v.encode() if isinstance(v, str) else v for v in values
    )
    answer = b'{"messages":' + messages + b',"values":[' + stored + b"]}"
    return Response(answer, media_type="application/json")


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    app.state.redis = Redis.from_url(os.environ["TOOLREF_REDIS_URL"])
    yield
    await app.state.redis.aclose()


app = Starlette(
    routes=[
        Route("/register", register, methods=["POST"]),
        Route("/resolve", resolve, methods=["POST"]),
        Route("/hydrate", hydrate, methods=["POST"]),
    ],
    lifespan=lifespan,
)
