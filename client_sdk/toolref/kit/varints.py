"""Unsigned LEB128 varints (7 bits a byte, low first), as the edits' records and the
channel's frames write lengths and stream ids. Pure; at most 10 bytes read (64 bits)."""

from __future__ import annotations


def varint(value: int) -> bytes:
    """`value` (at least 0) as a varint."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def read_varint(blob: bytes, at: int) -> tuple[int | None, int]:
    """The varint at `at` and the offset after it; None when `blob` ends first or it runs
    past 64 bits."""
    value = shift = 0
    while at < len(blob) and shift <= 63:
        byte = blob[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    return None, at
