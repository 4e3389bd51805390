"""Stored records built straight from an invocation's values, for tests that plant or
compare records without going through the service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolref_server.storage import record


def encode_values(
    invocation: Mapping[str, Any], digest: bytes, size: int, compress_threshold: int
) -> bytes:
    """`record.encode` for an invocation given as values (payloads written compact, as the
    service writes an invocation registered in wire form)."""
    return record.encode(
        invocation["name"],
        is_error=bool(invocation.get("isError", False)),
        payload=record.payload_of(invocation),
        digest=digest,
        size=size,
        compress_threshold=compress_threshold,
    )
