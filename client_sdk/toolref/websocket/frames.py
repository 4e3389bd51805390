"""The messages a relay sends a gateway over a WebSocket (`Toolref-Frames`): the agent's
own messages, each text message sent against the one before it on the connection.

An agent on the Responses WebSocket sends one `response.create` per turn, and each repeats
most of the one before (instructions, tools): sent against it, a turn costs what changed.
Each side keeps the last text message of the connection (the base, empty at first); what
travels is either

- a text message: the agent's text message as it is (the relay sends it so when
  compressing would not make it smaller); it becomes the base;
- a binary message `b"\\x01" + zstd`: a text message, one zstd frame (its size and checksum
  declared) compressed against the base as a raw-content dictionary (plain zstd while the
  base is empty); the decoded bytes are the agent's, exactly, and become the base;
- a binary message `b"\\x02" + bytes`: the agent's binary message as it is (the base stays);
- a binary message `b"\\x03" + edit`: a text message as an edit of the base, its new
  segments each in a compression context of its own (`segmented`; size-guarded, what
  `Toolref-Frames: 2` sends): a segment's size depends on its own bytes alone, where `\\x01`
  frames let an attacker's text in one turn be measured against a secret in the one before.

Pure: `Encoder` and `Decoder` hold a base each and do no I/O. Decoding refuses a frame
that declares more than its limit before inflating it (`DecompressedTooLargeError`), one
whose checksum does not match (a base that differs) or any other first byte
(`DictionaryMismatchError`), and text that is not UTF-8 (`MalformedBodyError`).
"""

from __future__ import annotations

from typing import Final, Literal

import zstandard

from toolref.websocket import segmented
from toolref.wire.compression import frame_size
from toolref.wire.errors import DictionaryMismatchError, MalformedBodyError

TEXT_ZSTD: Final = 0x01
BINARY: Final = 0x02
EDIT: Final = 0x03
Mode = Literal["segmented", "against-previous", "as-is"]
LEVEL: Final = 3  # zstd level: fast, and the dictionary does most of the work


def _compressor(base: bytes) -> zstandard.ZstdCompressor:
    if not base:
        return zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    data = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(level=LEVEL, dict_data=data, write_checksum=True)


def _decompressor(base: bytes) -> zstandard.ZstdDecompressor:
    if not base:
        return zstandard.ZstdDecompressor()
    data = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdDecompressor(dict_data=data)


class Encoder:
    """The relay's side: the agent's messages as they travel to the gateway. `mode`:
    "segmented" (`EDIT` frames, size-guarded: `Toolref-Frames: 2`), "against-previous"
    (`TEXT_ZSTD` frames: `1`, unguarded), or "as-is" (size-guarded toward a gateway that
    reads version 1 only: text as it is)."""

    def __init__(self, mode: Mode = "segmented") -> None:
        self.mode = mode
        self.base = b""
        self.previous = segmented.Previous()

    def encode(self, message: str | bytes) -> str | bytes:
        """What to send for one of the agent's messages. Linear in it and the base."""
        if isinstance(message, bytes):
            return bytes([BINARY]) + message
        raw = message.encode()
        if self.mode == "as-is":
            return message
        if self.mode == "segmented":
            packed = bytes([EDIT]) + segmented.encode(self.previous, raw)
        else:
            packed = bytes([TEXT_ZSTD]) + _compressor(self.base).compress(raw)
        self.base = raw
        return packed if len(packed) < len(raw) else message


class Decoder:
    """The gateway's side: the agent's messages back from what the relay sent, each at
    most `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.base = b""
        self.previous = segmented.Previous()

    def decode(self, message: str | bytes) -> str | bytes:
        """The agent's message. Linear in it, its decoded size (at most `limit`) and the
        base."""
        if isinstance(message, str):
            self.base = message.encode()
            self.previous.become(segmented.cut_message(self.base))
            return message
        if message[:1] == bytes([EDIT]):
            raw = segmented.decode(self.previous, message[1:], self.limit)
            self.base = raw
            return _text(raw)
        if not message or message[0] not in (TEXT_ZSTD, BINARY):
            first = f"0x{message[0]:02x}" if message else "nothing"
            raise DictionaryMismatchError(
                f"a binary message starts with {first}; with Toolref-Frames, send 0x01 and a "
                "zstd frame of a text message, 0x02 and a binary message, or 0x03 and an edit "
                "of the previous text message"
            )
        if message[0] == BINARY:
            return message[1:]
        raw = self._inflate(message[1:])
        text = _text(raw)
        self.base = raw
        self.previous.become(segmented.cut_message(raw))
        return text

    def _inflate(self, frame: bytes) -> bytes:
        size = frame_size(frame, self.limit, _FIX, less="send smaller messages")
        inflater = _decompressor(self.base).decompressobj()
        try:
            data = inflater.decompress(frame)
        except zstandard.ZstdError as exc:
            raise DictionaryMismatchError(
                f"the zstd frame does not decode against the previous text message ({exc}); {_FIX}"
            ) from None
        if not inflater.eof or inflater.unused_data or len(data) != size:
            raise DictionaryMismatchError(
                f"the zstd frame is cut short or followed by more; {_FIX}"
            )
        return data


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise MalformedBodyError(
            "a compressed text message is not UTF-8 once decoded; compress the text "
            "message's own UTF-8 bytes"
        ) from None


_FIX: Final = (
    "compress each text message against the previous text message of the connection "
    "(toolref.websocket.frames.Encoder), as one frame with its size and checksum"
)
