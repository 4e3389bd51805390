"""`toolref.websocket.frames`: the relay's messages to the gateway, each text message compressed
against the one before it; decoded to the agent's exact bytes, or refused."""

from __future__ import annotations

import json

import pytest
import zstandard

from toolref.websocket.frames import BINARY, EDIT, TEXT_ZSTD, Decoder, Encoder, Mode
from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
)


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


@pytest.mark.parametrize("mode", ["segmented", "against-previous"])
def test_every_message_decodes_to_the_agents_exact_bytes_and_later_turns_travel_small(
    mode: Mode,
) -> None:
    encoder, decoder = Encoder(mode), Decoder(limit=1 << 20)
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


def _guess_turn(n: int, text: str) -> str:
    items = [{"type": "function_call_output", "call_id": f"c{n}", "output": text}]
    tools = [{"type": "function", "name": f"tool_{i}"} for i in range(20)]
    return json.dumps({"type": "response.create", "tools": tools, "input": items})


@pytest.mark.parametrize(("mode", "oracle"), [("segmented", False), ("against-previous", True)])
def test_a_guess_at_the_turn_before_s_secret_costs_its_own_bytes(mode: Mode, oracle: bool) -> None:
    """Issue 37, M1, over the WebSocket: the turn before carried a secret (a file read);
    this turn's tool output, text an attacker wrote, guesses it. Segmented (size-guarded,
    `Toolref-Frames: 2`): the right guess and wrong ones cost the same bytes; compressed
    against the turn before (`1`), the right one costs fewer."""
    secret = "q7Xk2LmP9vRt"
    sizes = {}
    for guess in (secret, secret[::-1], secret[::2] + secret[1::2]):
        encoder, decoder = Encoder(mode), Decoder(limit=1 << 20)
        before = _guess_turn(0, f"cat .env\nDEPLOY_TOKEN={secret}\nREGION=eu-west-1\n")
        decoder.decode(encoder.encode(before))
        page = _guess_turn(1, f"the notes say: DEPLOY_TOKEN={guess}\nREGION=eu-west-1\n")
        wire = encoder.encode(page)
        assert decoder.decode(wire) == page
        sizes[guess] = len(wire) if isinstance(wire, bytes) else len(wire.encode())
        if mode == "segmented":
            assert isinstance(wire, bytes)
            assert wire[0] == EDIT
    right, *wrong = sizes.values()
    if oracle:
        assert right < min(wrong), sizes
    else:
        assert {right, *wrong} == {right}, sizes


def test_as_is_sends_text_as_it_is() -> None:
    """Size-guarded toward a gateway that reads version 1 only: text as it is."""
    encoder, decoder = Encoder("as-is"), Decoder(limit=1 << 20)
    for n in range(3):
        message = _turn(n)
        assert encoder.encode(message) == message
        assert decoder.decode(message) == message
