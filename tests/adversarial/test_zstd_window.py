"""A zstd body declaring a window past 8 MiB is refused before its window is allocated.

Found: the decoders took any window up to zstd's own default most (128 MiB). A 1 MiB body
whose frame declared a 128 MiB window and held 64 MiB of repeated data made the decoder
touch 64 MiB of window, charged to no budget, besides the 64 MiB of output it was charged
for. RFC 9659 bounds the `zstd` content coding's window at 8 MiB (an encoder must not use
more, a decoder need not take more): every reader of a zstd body (the registry's REST reader
and the gateway, `toolref.wire.compression.inflate`: the relay, the middleware) now refuses
a frame declaring more with a 400 `malformed-body` naming the limit, before decoding it.
"""

from __future__ import annotations

import json
from typing import Final

import httpx
import pytest
import zstandard
from redis.asyncio import Redis

from tests.support.servers import serve
from toolref.wire import compression
from toolref.wire.errors import MalformedBodyError
from toolref_server.app import create_app
from toolref_server.settings import Settings

from .bombs import PROTOCOL, register_body, stored_records

pytestmark = pytest.mark.engine

MIB: Final = 1024 * 1024


def framed(body: bytes, window_log: int) -> bytes:
    """`body` as one zstd frame of unknown content size declaring a window of
    2**`window_log` bytes (what a streaming compressor at that window writes)."""
    params = zstandard.ZstdCompressionParameters(window_log=window_log)
    writer = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = writer.compress(body) + writer.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 2**window_log
    return frame


async def test_the_registry_refuses_a_zstd_window_past_8_mib_and_stores_nothing(
    redis: Redis,
) -> None:
    app = create_app(Settings(redis_url="unused"), redis=redis)
    headers = {**PROTOCOL, "content-encoding": "zstd"}
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        refused = await client.post(
            "/v1/invocations", content=framed(register_body(1, 2000), 27), headers=headers
        )
        assert refused.status_code == 400, (refused.status_code, refused.text[:300])
        assert refused.headers["content-type"] == "application/problem+json"
        problem = refused.json()
        assert problem["type"] == "urn:toolref:problem:malformed-body", problem
        assert "8 MiB" in problem["detail"], problem["detail"]
        assert await stored_records(redis) == 0
        served = await client.post(
            "/v1/invocations", content=framed(register_body(2, 2000), 23), headers=headers
        )
        assert served.status_code == 200, served.text[:300]
    assert await stored_records(redis) == 1


def test_inflate_refuses_a_window_past_8_mib_and_takes_8_mib() -> None:
    """`compression.inflate` (the relay's reader of an agent's zstd body, the middleware's)."""
    body = json.dumps({"input": "x" * 5000}).encode()
    assert compression.inflate(framed(body, 23), 10 * MIB) == body
    with pytest.raises(MalformedBodyError, match="8 MiB"):
        compression.inflate(framed(body, 24), 10 * MIB)
