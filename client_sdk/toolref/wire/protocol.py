"""Protocol versions and the header that negotiates them.

1: full payloads (what a request without the header speaks); 2: refs. The client sends the
highest version it speaks; the server answers with the version it used, never higher.
"""

from __future__ import annotations

from typing import Final

from toolref.wire.errors import InvalidProtocolError
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.numbers import describe, whole_number

PROTOCOL_FULL: Final = 1
PROTOCOL_REFS: Final = 2
PROTOCOL_LOW: Final = PROTOCOL_FULL
PROTOCOL_HIGH: Final = PROTOCOL_REFS
MAX_VERSION_DIGITS: Final = 9


def negotiate(header: str | None, high: int = PROTOCOL_HIGH) -> int:
    """The version to use for a request whose header says `header`."""
    if header is None:
        return PROTOCOL_FULL
    text = header.strip()
    # A version has at most 9 digits: longer text is refused, not converted (Python reads
    # at most 4300 digits, and a 500 would be the answer).
    version = whole_number(text, MAX_VERSION_DIGITS)
    if version is None or version < PROTOCOL_LOW:
        raise InvalidProtocolError(
            f"{PROTOCOL_HEADER}: {describe(text)} is not a protocol version; send an integer "
            f"from {PROTOCOL_LOW} to {high} of at most {MAX_VERSION_DIGITS} digits (or omit "
            f"the header for {PROTOCOL_FULL})",
            supported={"low": PROTOCOL_LOW, "high": high},
        )
    return min(version, high)
