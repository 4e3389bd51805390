"""Every python block of docs/sdk.md runs as written, in order, against real servers over
sockets (the doc says so of all of them).

The registry (the app on the test engine, with the doc's `trk_...` as its one API key), the
doc's own chat backend (its block, scripted stand-in for the LLM included) and
examples/llm_backend.py behind `ToolRefMiddleware` are served by uvicorn; the doc's
placeholder addresses are replaced by theirs, and nothing else is given: each block runs off
the event loop (the servers are on it) in a namespace of its own, as a reader would paste
it. Before, the backend's `call_llm` was undefined, and this test supplied one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
from typing import Any

import pytest
from examples.llm_backend import create_backend
from redis.asyncio import Redis

from tests.support.servers import serve, serve_all
from toolref import AsyncRegistryClient
from toolref_server.app import create_app
from toolref_server.settings import Settings

from ..unit.test_docs import SDK_DOC, _python_blocks

REGISTRY, CHAT, LLM = "http://127.0.0.1:8750", "http://127.0.0.1:8000", "http://127.0.0.1:8001"
KEY = "trk_..."


def run(block: str, addresses: dict[str, str]) -> tuple[dict[str, Any], str]:
    """Run `block` with the servers' addresses; its namespace and what it printed."""
    for placeholder, url in addresses.items():
        block = block.replace(placeholder, url)
    namespace: dict[str, Any] = {"__name__": "docs_sdk"}  # nothing supplied
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "docs/sdk.md", "exec"), namespace)
    return namespace, printed.getvalue()


@pytest.mark.slow
async def test_every_python_block_of_the_sdk_doc_runs(redis: Redis) -> None:
    blocks = _python_blocks(SDK_DOC)
    [backend] = [b for b in blocks if "ToolRefMiddleware" in b and "add_middleware" in b]
    key_hash = hashlib.sha256(KEY.encode()).hexdigest()
    service = create_app(Settings(redis_url="unused", api_keys=f"docs={key_hash}"), redis=redis)
    async with serve(service) as registry_url:
        doc_backend = run(backend, {REGISTRY: registry_url})[0]
        chat = doc_backend["app"]
        llm_registry = AsyncRegistryClient(registry_url, api_key=KEY)
        async with serve_all(chat, create_backend(llm_registry)) as [chat_url, llm_url]:
            addresses = {REGISTRY: registry_url, CHAT: chat_url, LLM: llm_url}
            outputs = [await asyncio.to_thread(run, block, addresses) for block in blocks]
        await llm_registry.aclose()
        await doc_backend["registry"].aclose()
    assert (
        len(outputs) == len(blocks) >= 10
    )  # client, backend, 2 streaming, 4 SDKs, gateway, registry
    assert "Every Python block below runs as written" in SDK_DOC.replace("\n", " ")
    printed = "\n".join(text for _, text in outputs)
    assert "uploaded" in printed  # the client app's savings line
    assert '"object": "chat.completion.chunk"' in printed  # manager.stream's events
    assert "You said: hi" in printed  # the SDKs' streamed text
    assert "Savings(requests=1" in printed  # transport.manager.savings
    assert "x = 1" in printed  # the registry block's get()
