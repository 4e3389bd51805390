"""Protocol versions and the header that negotiates them.

1: full payloads (what a request without the header speaks); 2: refs. The client sends the
highest version it speaks; the server answers with the version it used, never higher.
"""

from __future__ import annotations

from typing import Final

from toolref.errors import InvalidProtocolError

PROTOCOL_HEADER: Final = "Toolref-Protocol"
PROTOCOL_FULL: Final = 1
PROTOCOL_REFS: Final = 2
PROTOCOL_LOW: Final = PROTOCOL_FULL
PROTOCOL_HIGH: Final = PROTOCOL_REFS


def negotiate(header: str | None, high: int = PROTOCOL_HIGH) -> int:
    """The version to use for a request whose header says `header`."""
    if header is None:
        return PROTOCOL_FULL
    text = header.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < PROTOCOL_LOW:
        shown = text if len(text) <= 16 else text[:13] + "..."
        raise InvalidProtocolError(
            f"{PROTOCOL_HEADER}: {shown!r} is not a protocol version; send an integer from "
            f"{PROTOCOL_LOW} to {high} (or omit the header for {PROTOCOL_FULL})",
            supported={"low": PROTOCOL_LOW, "high": high},
        )
    return min(int(text), high)
