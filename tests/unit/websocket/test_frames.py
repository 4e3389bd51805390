"""`toolref.wire.frames`: the relay's messages to the gateway, each text message compressed
against the one before it; decoded to the agent's exact bytes, or refused."""

from __future__ import annotations

import json

import pytest
import zstandard

from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)
from toolref.wire.frames import BINARY, TEXT_ZSTD, Decoder, Encoder


def _turn(n: int) -> str:
    tools = [
        {"type": "function", "name": f"tool_{i}", "parameters": {"type": "object"}}
        for i in range(40)
    ]
    items = [{"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n}"}]
    event = {"type": "response.create", "model": "m", "tools": tools, "input": items}
    if n:
        event["previous_response_id"] = f"resp_{n - 1}"
    return json.dumps(event, indent=1 if n % 2 else None)


def test_every_message_decodes_to_the_agents_exact_bytes_and_later_turns_travel_small() -> None:
    encoder, decoder = Encoder(), Decoder(limit=1 << 20)
    sent = [_turn(n) for n in range(6)] + ["not json at all", '{"a": 1e400, "a": -0}']
    sizes = []
    for message in sent:
        wire = encoder.encode(message)
        sizes.append(len(wire) if isinstance(wire, bytes) else len(wire.encode()))
        got = decoder.decode(wire)
        assert isinstance(got, str)
        assert got.encode() == message.encode()
    # Turns 2.. repeat the tools of the turn before: each costs a small part of its size.
    assert all(size * 5 < len(_turn(n)) for n, size in zip(range(2, 6), sizes[2:6], strict=True))


def test_a_message_that_would_not_shrink_travels_as_text() -> None:
    encoder = Encoder()
    assert encoder.encode("x") == "x"
    assert encoder.base == b"x"


def test_binary_messages_pass_as_they_are_and_leave_the_base() -> None:
    encoder, decoder = Encoder(), Decoder(limit=100)
    decoder.decode(encoder.encode("base text, base text, base text, base text"))
    wire = encoder.encode(b"\x00\x01")
    assert wire == bytes([BINARY]) + b"\x00\x01"
    assert decoder.decode(wire) == b"\x00\x01"
    assert decoder.base == encoder.base


def test_a_frame_against_another_base_is_refused() -> None:
    encoder, decoder = Encoder(), Decoder(limit=1 << 20)
    first, second = _turn(1), _turn(2)
    encoder.encode(first)
    wire = encoder.encode(second)
    assert isinstance(wire, bytes)
    with pytest.raises(DictionaryMismatchError):
        decoder.decode(wire)  # the decoder never saw `first`


def test_a_frame_declaring_more_than_the_limit_is_refused_before_inflating() -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b"a" * 10_000)
    with pytest.raises(DecompressedTooLargeError):
        Decoder(limit=9_999).decode(bytes([TEXT_ZSTD]) + frame)


def test_a_frame_without_size_or_checksum_is_refused() -> None:
    compressor = zstandard.ZstdCompressor(write_checksum=False)
    with pytest.raises(DictionaryMismatchError):
        Decoder(limit=100).decode(bytes([TEXT_ZSTD]) + compressor.compress(b"abc"))


@pytest.mark.parametrize("message", [b"", b"\x07abc", bytes([TEXT_ZSTD]) + b"not zstd"])
def test_other_binary_messages_are_refused(message: bytes) -> None:
    with pytest.raises(DictionaryMismatchError):
        Decoder(limit=100).decode(message)


def test_text_that_is_not_utf8_once_decoded_is_refused() -> None:
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b"\xff\xfe")
    with pytest.raises(MalformedBodyError):
        Decoder(limit=100).decode(bytes([TEXT_ZSTD]) + frame)
