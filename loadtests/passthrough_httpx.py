"""A second floor for the gateway-speed bench: a pass-through proxy on the gateway's own
stack, a bare ASGI app on uvicorn forwarding with httpx (pooled), the answer streamed back.

Between the asyncio-streams floor (`loadtests.passthrough`) and the gateway: what uvicorn's
HTTP/1.1 server and an HTTP client library cost before any of toolref's work.

    BENCH_UPSTREAM=http://127.0.0.1:8790 uvicorn loadtests.passthrough_httpx:app --port 8792
"""

from __future__ import annotations

import os
from typing import Any

import httpx

_DROP = {b"host", b"content-length", b"connection", b"transfer-encoding"}
_client = httpx.AsyncClient(
    base_url=os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:8790"),
    limits=httpx.Limits(max_connections=256, max_keepalive_connections=256),
    timeout=60,
    trust_env=False,
)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    pieces, more = [], True
    while more:
        message = await receive()
        pieces.append(message.get("body", b""))
        more = message.get("more_body", False)
    headers = [(k, v) for k, v in scope["headers"] if k not in _DROP]
    outgoing = _client.build_request(
        scope["method"], scope["raw_path"].decode(), headers=headers, content=b"".join(pieces)
    )
    answer = await _client.send(outgoing, stream=True)
    try:
        back = [(k, v) for k, v in answer.headers.raw if k.lower() not in _DROP]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": back})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await answer.aclose()
