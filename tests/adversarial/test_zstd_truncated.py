"""A zstd body cut mid-frame is refused as truncated, never read as its prefix.

Found: the registry's request reader (`toolref_server.http.inflater.Inflater`) and
`toolref.wire.compression.inflate` (the relay's reader of an agent's zstd body, the
gateway's and the middleware's hydrator, an edit's zstd records) took a body that ended
inside a frame and gave what the frame had produced so far. zstd writes whole blocks, and
RFC 8878 lets frames follow one another, so with several frames the prefix could be valid
JSON: the registry stored it (200), the relay and the middleware handed it on as the whole
request. A frame missing only its checksum inflated whole with the checksum never checked.
A truncated gzip body was already refused (400 `malformed-body`, "truncated"); zstd now is
too, everywhere, while frames back to back (skippable ones too) are still taken.
"""

from __future__ import annotations

import json
from typing import Any, Final

import httpx
import pytest
import zstandard
from redis.asyncio import Redis

from tests.conftest import snapshot
from tests.integration.relay_gateway import KEY, Scripted, gateway
from tests.support.servers import serve
from toolref import AsyncRegistryClient, ToolRefMiddleware
from toolref.edits import isolated, shipped, wire
from toolref.kit.varints import read_varint, varint
from toolref.sending.editor import Editor
from toolref.wire import compression
from toolref.wire.errors import DecompressedTooLargeError, MalformedBodyError
from toolref_relay import Relay, RelayConfig
from toolref_server.app import create_app
from toolref_server.http.inflater import Inflater, TooLarge
from toolref_server.settings import Settings

from .bombs import PROTOCOL, register_body, stored_records

pytestmark = pytest.mark.engine

MIB: Final = 1024 * 1024
SPACES: Final = 300_000  # three blocks of whitespace (zstd's blocks hold at most 128 KiB)
SKIPPABLE: Final = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"notes"  # RFC 8878 3.1.2


def frame(data: bytes) -> bytes:
    """`data` as one zstd frame with its checksum, as `zstd` and Python's zstd write it."""
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def two_frames(body: bytes) -> tuple[bytes, dict[str, int]]:
    """`body` (JSON) as a frame, then a frame of whitespace after it; and where to cut the
    second frame so that what it inflates to so far is still `body` and whitespace: after
    its header, after its first block, inside its checksum, one byte short."""
    first = frame(body)
    whole = first + frame(b" " * SPACES)
    reader = zstandard.ZstdDecompressor().stream_reader(whole[len(first) : -4])
    assert reader.read(), "the second frame's first block inflates by itself"
    cuts = {"header": len(first) + 6, "block": len(whole) - 10, "checksum": len(whole) - 3}
    return whole, {**cuts, "last byte": len(whole) - 1}


BODY: Final = json.dumps({"invocations": [{"name": "ls", "args": {}, "result": "a\nb\n"}]})
WHOLE, CUTS = two_frames(BODY.encode())


def prefixes() -> list[Any]:
    return [pytest.param(WHOLE[:at], id=name) for name, at in CUTS.items()]


@pytest.mark.parametrize("cut", prefixes())
def test_inflate_refuses_a_body_cut_mid_frame(cut: bytes) -> None:
    """Before: each cut inflated to `BODY` and some whitespace, valid JSON."""
    with pytest.raises(MalformedBodyError, match="truncated"):
        compression.inflate(cut, 10 * MIB)


@pytest.mark.parametrize("cut", prefixes())
@pytest.mark.parametrize("piece", [7, 4096, 1 << 20])
def test_the_registrys_reader_refuses_a_body_cut_mid_frame(cut: bytes, piece: int) -> None:
    """The body fed as it arrives, in pieces of `piece` bytes."""
    inflater = Inflater("zstd", 10 * MIB)
    for at in range(0, len(cut), piece):
        inflater.feed(cut[at : at + piece])
    with pytest.raises(MalformedBodyError, match="truncated"):
        inflater.finish()


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 20])
def test_frames_back_to_back_and_skippable_frames_are_still_taken(piece: int) -> None:
    """RFC 8878: a zstd body is frames one after the other, skippable ones among them."""
    body = BODY.encode()
    halves = body[:20], body[20:]
    sent = SKIPPABLE + frame(halves[0]) + SKIPPABLE + frame(b"") + frame(halves[1]) + SKIPPABLE
    assert compression.inflate(sent, 10 * MIB) == body
    inflater = Inflater("zstd", 10 * MIB)
    for at in range(0, len(sent), piece):
        inflater.feed(sent[at : at + piece])
    assert inflater.finish() == body
    assert compression.inflate(WHOLE, 10 * MIB) == body + b" " * SPACES
    assert compression.inflate(b"", 10) == b""


def test_the_registrys_reader_bounds_the_frames_of_a_body() -> None:
    """Each frame costs the streaming reader a decoder of its own: more than `MAX_FRAMES`
    is refused as they come (before: 32 MiB of 10-byte frames took 1.2 s). `inflate` walks
    the frames of a whole body first, and takes as many (`test_frame_counts`)."""
    tiny = frame(b"x")
    fits = tiny * compression.MAX_FRAMES
    inflater = Inflater("zstd", 10 * MIB)
    inflater.feed(fits)
    assert inflater.finish() == b"x" * compression.MAX_FRAMES
    inflater = Inflater("zstd", 10 * MIB)
    with pytest.raises(MalformedBodyError, match=f"more than {compression.MAX_FRAMES} zstd"):
        inflater.feed(fits + tiny)
    assert compression.inflate(fits, 10 * MIB) == b"x" * compression.MAX_FRAMES


def test_the_inflated_bound_still_holds_across_frames() -> None:
    """Frames of 1 MiB of zeros each: past the limit as the output grows, whatever the
    frames, one 64 KiB step past it at most."""
    bomb = frame(bytes(MIB)) * 4
    inflater = Inflater("zstd", 3 * MIB + 10)
    with pytest.raises(TooLarge):
        inflater.feed(bomb)
    assert inflater.kept.size <= 3 * MIB + 10 + 64 * 1024
    with pytest.raises(DecompressedTooLargeError, match="inflates past the limit"):
        compression.inflate(bomb, 3 * MIB + 10)


@pytest.mark.parametrize("cut", [1, 4])
def test_an_edit_record_whose_frame_is_cut_is_refused(cut: int) -> None:
    """A kind-1 record (a zstd frame of its own) missing the end of its frame: before, one
    missing its checksum inflated whole, accepted with the checksum never checked."""
    segment = b'{"role":"tool","content":"' + b"line of output\n" * 40 + b'"}'
    framed = frame(segment)[:-cut]
    record = bytes([isolated.ALONE]) + varint(len(framed)) + framed
    with pytest.raises(MalformedBodyError, match="truncated"):
        isolated.unpack(record, [len(segment)], None)
    whole = frame(segment)
    record = bytes([isolated.ALONE]) + varint(len(whole)) + whole
    assert isolated.unpack(record, [len(segment)], None) == [segment]


async def test_the_registry_refuses_a_cut_body_and_stores_nothing(redis: Redis) -> None:
    """Over a socket: before, each cut was 200 and stored the prefix's invocation."""
    app = create_app(Settings(redis_url="unused"), redis=redis)
    body, cuts = two_frames(register_body(1, 2000))
    headers = {**PROTOCOL, "content-encoding": "zstd"}
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        for name, at in cuts.items():
            refused = await client.post("/v1/invocations", content=body[:at], headers=headers)
            assert refused.status_code == 400, (name, refused.status_code, refused.text[:300])
            assert refused.headers["content-type"] == "application/problem+json"
            problem = refused.json()
            assert problem["type"] == "urn:toolref:problem:malformed-body", problem
            assert "truncated" in problem["detail"], problem["detail"]
            assert await stored_records(redis) == 0, name
        served = await client.post("/v1/invocations", content=body, headers=headers)
        assert served.status_code == 200, served.text[:300]
    assert await stored_records(redis) == 1


async def test_the_relay_refuses_a_cut_body_and_sends_nothing(redis: Redis) -> None:
    """The relay in front of the gateway, over sockets: before, the prefix reached the
    provider as the agent's whole request (200)."""
    scripted = Scripted()
    request = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    body, cuts = two_frames(json.dumps(request).encode())
    headers = {
        "content-type": "application/json",
        "content-encoding": "zstd",
        "anthropic-version": "2023-06-01",
    }
    async with gateway(redis, {"anthropic": scripted.app()}) as recorded:
        relay = Relay(RelayConfig(recorded.url, key=KEY, channel=False), report=lambda _: None)
        async with serve(relay) as relay_url, httpx.AsyncClient(timeout=60) as agent:
            url = relay_url + "/llm/anthropic/v1/messages"
            for name, at in cuts.items():
                refused = await agent.post(url, content=body[:at], headers=headers)
                assert refused.status_code == 400, (name, refused.status_code, refused.text)
                error = refused.json()
                assert error["type"] == "error", error  # the provider's shape
                assert "truncated" in error["error"]["message"], error
            assert recorded.arrivals == []
            assert scripted.received == []
            served = await agent.post(url, content=body, headers=headers)
    assert served.status_code == 200, served.text
    assert [json.loads(got) for got in scripted.received] == [request]


async def test_a_chat_backends_middleware_refuses_a_cut_body(redis: Redis) -> None:
    """`ToolRefMiddleware` served over a socket: before, the app got the prefix as the
    request (200)."""
    service = create_app(Settings(redis_url="unused"), redis=redis)
    reached: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        reached.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    chat = {"messages": [{"role": "user", "content": "hi"}]}
    body, cuts = two_frames(json.dumps(chat).encode())
    headers = {**PROTOCOL, "content-encoding": "zstd"}
    async with service.router.lifespan_context(service):
        registry = AsyncRegistryClient(
            "http://localhost:8750", transport=httpx.ASGITransport(app=service)
        )
        backend = ToolRefMiddleware(app, registry)
        async with serve(backend) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            for name, at in cuts.items():
                refused = await client.post("/chat", content=body[:at], headers=headers)
                assert refused.status_code == 400, (name, refused.status_code, refused.text)
                assert refused.headers["content-type"] == "application/problem+json"
                assert "truncated" in refused.json()["detail"], refused.json()
            assert reached == []
            served = await client.post("/chat", content=body, headers=headers)
        await registry.aclose()
    assert served.status_code == 200, served.text
    assert [json.loads(got) for got in reached] == [chat]


def _cut_first_zstd_record(edit: bytes, cut: int) -> bytes:
    """`edit` with the frame of its first zstd record (kind 1, 4 or 7) `cut` bytes short, its
    size (the varint before it) made to match: a record that reads, but for its frame."""
    header, blob = wire.read(edit, 1 << 30)
    start = len(edit) - len(blob)
    at = 0
    for length in header.lengths:
        mode, at = blob[at], at + 1
        if mode == isolated.RAW:
            at += length
            continue
        if mode in (isolated.JOINED, isolated.BROTLI_JOINED):
            _, at = read_varint(blob, at)
        held = at
        size, at = read_varint(blob, at)
        assert size is not None
        if mode in (isolated.ALONE, isolated.JOINED, shipped.KIND):
            framed = blob[at : at + size - cut]
            rest = blob[at + size :]
            return edit[:start] + blob[:held] + varint(len(framed)) + framed + rest
        brotli = mode in (isolated.BROTLI, isolated.BROTLI_JOINED)
        at += size + (isolated.CRC_BYTES if brotli else 0)
    raise AssertionError("the edit has no zstd record")


@pytest.mark.parametrize("cut", [1, 4, 9])
async def test_an_edit_whose_zstd_record_is_cut_is_refused(redis: Redis, cut: int) -> None:
    """POST /v1/edits:apply over a socket (what `withToolRef` and `ToolRefMiddleware` send
    an edit to): before, a record missing its checksum was applied (200) unchecked."""
    messages = [{"role": "user", "content": "ls\n" + "file.py\n" * 3000}]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    edit = Editor().prepare([("content-type", "application/json")], body, "messages")
    assert edit is not None
    app = create_app(Settings(redis_url="unused"), redis=redis)
    headers = {"content-type": wire.MEDIA_TYPE}
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        before = await snapshot(redis)
        cut_edit = _cut_first_zstd_record(edit.body, cut)
        refused = await client.post("/v1/edits:apply", content=cut_edit, headers=headers)
        assert refused.status_code == 400, (refused.status_code, refused.text[:300])
        assert refused.headers["content-type"] == "application/problem+json"
        problem = refused.json()
        assert problem["type"] == "urn:toolref:problem:malformed-body", problem
        assert "truncated" in problem["detail"], problem["detail"]
        assert await snapshot(redis) == before
        served = await client.post("/v1/edits:apply", content=edit.body, headers=headers)
    assert served.status_code == 200, served.text[:300]
    assert body in served.content
