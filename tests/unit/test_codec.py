"""Body limits, decompression bounds, decoding and content negotiation."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from toolref.wire import encoding
from toolref.wire.errors import (
    BodyTooLargeError,
    DecompressedTooLargeError,
    MalformedBodyError,
    NestingTooDeepError,
    NonFiniteNumberError,
    ToolrefError,
    TooManyItemsError,
    UnsupportedValueError,
)
from toolref_server import documents
from toolref_server.http import codec

LIMITS = documents.BodyLimits(max_body_bytes=2**20, max_decompressed_bytes=4 * 2**20, max_depth=16)


def request(body: bytes, headers: dict[str, str], chunk: int = 16_384) -> Request:
    """A Starlette request whose body arrives in `chunk`-sized pieces."""

    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]

    async def receive() -> dict[str, Any]:
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    return Request(scope, receive)


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
async def test_bomb_stops_within_one_chunk_of_the_limit(encoding: str) -> None:
    raw = b"A" * (200 * 2**20)
    packed = gzip.compress(raw, 9) if encoding == "gzip" else zstandard.compress(raw, 19)
    assert len(packed) < LIMITS.max_body_bytes
    tracemalloc.start()
    try:
        with pytest.raises(DecompressedTooLargeError) as info:
            await codec.read_body(request(packed, {"content-encoding": encoding}), LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.status == 413
    # Never holds much more than the limit, although the body would inflate to 200 MiB.
    assert peak < LIMITS.max_decompressed_bytes + 2 * 2**20


async def test_inflating_exactly_to_the_limit_is_allowed() -> None:
    raw = b"x" * LIMITS.max_decompressed_bytes
    body = await codec.read_body(request(gzip.compress(raw), {"content-encoding": "gzip"}), LIMITS)
    assert body == raw
    with pytest.raises(DecompressedTooLargeError):
        await codec.read_body(
            request(gzip.compress(raw + b"x"), {"content-encoding": "gzip"}), LIMITS
        )


async def test_body_over_the_limit_stops_reading() -> None:
    with pytest.raises(BodyTooLargeError):
        await codec.read_body(request(b"x" * (2**20 + 1), {}), LIMITS)
    assert await codec.read_body(request(b"x" * 2**20, {}), LIMITS) == b"x" * 2**20


async def test_streamed_zstd_without_content_size() -> None:
    raw = json.dumps({"k": "v" * 100_000}).encode()
    compressor = zstandard.ZstdCompressor().compressobj()
    packed = compressor.compress(raw) + compressor.flush()
    assert await codec.read_body(request(packed, {"content-encoding": "zstd"}, 100), LIMITS) == raw


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", MalformedBodyError),
        (b"", MalformedBodyError),
        (b'{"a": NaN}', NonFiniteNumberError),
        (b"[1e400]", NonFiniteNumberError),
        (b'{"a": ' * 17 + b"1" + b"}" * 17, NestingTooDeepError),
        (b"[" * 50_000 + b"]" * 50_000, NestingTooDeepError),
    ],
)
def test_json_decoding_errors(body: bytes, error: type[ToolrefError]) -> None:
    with pytest.raises(error):
        documents.decode(body, "json", LIMITS)


def test_depth_limit_is_exact() -> None:
    def nest(depth: int) -> bytes:
        return b"[" * depth + b"]" * depth

    assert documents.decode(nest(16), "json", LIMITS) == json.loads(nest(16))
    with pytest.raises(NestingTooDeepError):
        documents.decode(nest(17), "json", LIMITS)


@pytest.mark.parametrize(
    "value",
    [b"\x00bin", msgpack.ExtType(5, b"x"), {1: "x"}, {b"k": 1}, [float("inf")]],
)
def test_msgpack_values_json_cannot_carry(value: Any) -> None:
    with pytest.raises((UnsupportedValueError, NonFiniteNumberError)):
        documents.decode(msgpack.packb({"v": value}, use_bin_type=True), "msgpack", LIMITS)


def test_big_integers_travel_as_msgpack_ext_1() -> None:
    value = {"id": 2**90, "neg": -(2**65), "small": 2**63}
    packed = encoding.packb(value)
    assert encoding.unpackb(packed) == value
    assert documents.decode(packed, "msgpack", LIMITS) == value


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from(["json", "msgpack"]))
def test_arbitrary_bytes_decode_or_raise_a_toolref_error(data: bytes, decoder: str) -> None:
    status = 200
    try:
        documents.decode(data, decoder, LIMITS)
    except ToolrefError as exc:
        status = exc.status
    assert status == 200 or 400 <= status < 500


@pytest.mark.parametrize(
    ("accept", "msgpack_wanted"),
    [
        (None, False),
        ("application/json", False),
        ("application/msgpack", True),
        ("application/x-msgpack", True),
        ("*/*", False),
        ("application/msgpack;q=0.9, application/json", False),
        ("application/json;q=0.5, application/msgpack", True),
        ("application/msgpack;q=0, */*", False),
        ("application/msgpack, */*;q=0.1", True),
        ("text/html", False),
        ("application/msgpack;q=bogus, application/json", False),
    ],
)
def test_accept_negotiation(accept: str | None, msgpack_wanted: bool) -> None:
    headers = {"accept": accept} if accept else {}
    assert codec.wants_msgpack(request(b"", headers)) is msgpack_wanted


@pytest.mark.parametrize(
    ("content_type", "decoder"),
    [
        ("application/json", "json"),
        ("application/json; charset=utf-8", "json"),
        ("application/problem+json", "json"),
        ("Application/MsgPack", "msgpack"),
        ("application/vnd.msgpack", "msgpack"),
    ],
)
def test_content_types(content_type: str, decoder: str) -> None:
    assert codec.request_decoder(request(b"", {"content-type": content_type})) == decoder


def test_msgpack_map_with_a_container_key_is_refused() -> None:
    # fixmap of 1 entry whose key is an empty array, value nil
    with pytest.raises(UnsupportedValueError, match="key"):
        documents.decode(b"\x81\x90\xc0", "msgpack", LIMITS)


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ({"messages": [{"a": 1}] * 40, "deep": _nested(16)}, NestingTooDeepError),
        ({"messages": [{"a": 1}] * 40 + [{"a": _nested(14)}]}, NestingTooDeepError),
        ({"messages": [{"a": 1}] * 40 + [{"a": _nested(13)}]}, None),  # at the limit
        ({"messages": [{"a": 1}] * 40 + [{"a": [0] * 201}]}, TooManyItemsError),
        ({"messages": [{"a": 1}] * 201}, TooManyItemsError),
    ],
)
def test_a_body_of_messages_is_held_to_depth_and_items_message_by_message(
    body: dict[str, Any], refused: type[Exception] | None
) -> None:
    limits = documents.BodyLimits(2**20, 2**20, max_depth=16, max_items=200)
    data = json.dumps(body).encode()
    if refused is None:
        assert documents.decode_document(data, "json", limits, "messages").value == body
        return
    with pytest.raises(refused):
        documents.decode_document(data, "json", limits, "messages")


def inputs_to_zlib(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each input zlib's inflaters are given from now on, in order."""
    import zlib

    sizes: list[int] = []
    made = zlib.decompressobj

    class Counted:
        def __init__(self, wbits: int) -> None:
            self.inner = made(wbits=wbits)

        def decompress(self, data: bytes, max_length: int) -> bytes:
            sizes.append(len(data))
            return self.inner.decompress(data, max_length)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    monkeypatch.setattr(zlib, "decompressobj", Counted)
    return sizes


def test_a_gzip_body_is_handed_to_the_inflater_a_chunk_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given the whole body, each step of bounded output copied what was left of it
    (`unconsumed_tail`): steps x input, half a second for 16 MiB of zeros then random
    bytes. Each call now gets at most 64 KiB; members back to back, a member cut short and
    bytes after the last still read as before."""
    import os

    from toolref.wire import compression

    sizes = inputs_to_zlib(monkeypatch)
    raw = bytes(4 << 20) + os.urandom(1 << 20)
    body = gzip.compress(raw, 1) + gzip.compress(b"tail", 1)
    assert compression.inflate_gzip(body, len(raw) + 4) == raw + b"tail"
    assert max(sizes) <= 64 << 10
    with pytest.raises(MalformedBodyError):
        compression.inflate_gzip(body[:-5], len(raw) + 4)
    with pytest.raises(MalformedBodyError):
        compression.inflate_gzip(body + b"junk", len(raw) + 4)
    with pytest.raises(DecompressedTooLargeError):
        compression.inflate_gzip(body, len(raw))


def test_a_request_body_fed_in_one_large_piece_is_inflated_a_chunk_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's streaming inflater (`http.inflater.Inflater`) given a whole gzip body
    at once (an ASGI server may hand over large pieces): zlib gets at most 64 KiB a call,
    so no step copies the rest of the piece."""
    import os

    from toolref_server.http.inflater import Inflater

    sizes = inputs_to_zlib(monkeypatch)
    raw = bytes(4 << 20) + os.urandom(1 << 20)
    inflater = Inflater("gzip", len(raw) + 4)
    inflater.feed(gzip.compress(raw, 1) + gzip.compress(b"tail", 1))
    assert inflater.finish() == raw + b"tail"
    assert max(sizes) <= 64 << 10
