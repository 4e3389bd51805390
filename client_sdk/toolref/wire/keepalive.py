"""How long a sender keeps an idle pooled connection to its receiver (a gateway, a backend):
less than the receiver keeps it.

A receiver closes a connection idle for its keep-alive (the gateway's
`TOOLREF_KEEP_ALIVE_TIMEOUT`, 5 s by default, announced as `keep_alive_seconds` in its
capabilities; uvicorn's `timeout_keep_alive`, 5 s too). httpx keeps one idle for 5 s as
well (`keepalive_expiry`), and httpcore drops an idle connection only once it sees the
close arrive: a request written in the moment the receiver's close is on its way fails
(`RemoteProtocolError`, `ReadError`), and a POST that may have reached the receiver is never
sent twice. Kept for less than the receiver keeps it (`expiry`), a connection is dropped by
the sender first, and the race cannot happen.
"""

from __future__ import annotations

from typing import Final

# Before the receiver said how long it keeps an idle connection: below the 5 s of the
# gateway's default and uvicorn's.
DEFAULT_SECONDS: Final = 4.0
MARGIN_SECONDS: Final = 1.0  # the close on its way, and the sender's clock started later


def expiry(announced: float | None) -> float:
    """Seconds to keep an idle connection to a receiver that closes one after `announced`
    seconds (None: not said): a second less, at most half of it for a short one, never
    more than `DEFAULT_SECONDS`."""
    if announced is None or announced <= 0:
        return DEFAULT_SECONDS
    return min(DEFAULT_SECONDS, max(announced - MARGIN_SECONDS, announced / 2))
