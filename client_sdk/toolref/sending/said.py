"""`Said`: which edits version a sender writes to a receiver, from the versions it said
recently. Every Python sender's rule (the relay's `toolref_relay.capabilities`, the SDK's
`toolref.sending.sender.Sender`); JS's twin is `client_sdk/js/src/edits/said.ts`.

A receiver says a version in each answer's `Toolref-Edits` (the relay also reads its
capabilities), and one that refuses an edit 400 `malformed-body` says, without a header, that
it reads less than the bytes the edit was written in (`unreadable`: a receiver rolled back).
The version written is the lowest said within `RECENT` seconds where that one does not read
the bytes written for the highest said (`wire.written_as`: versions 5 and 6 write version
5's), else the highest said within it, else the last said. So replicas of 4 and 6 behind one
address are sent what both read, not a refused edit every other turn; replicas of 5 and 6
(the same bytes) keep 6, each answer tapped by its own `Toolref-Edits`; replicas of 6 and 7
are sent 6 (5's bytes); rolled forward, a sender writes more once no lower version was said
for `RECENT`.

Pure: the caller passes its clock's reading (`now`, seconds, monotonic). At most one entry
per version: O(versions) a call.

`unreadable_said`: the warning a sender logs once it stepped down on such a refusal, in the
words JS's `unreadableSaid` writes (shared vectors: tests/js_said_vectors.py).
"""

from __future__ import annotations

from typing import Final

from toolref.edits.wire import VERSIONS, written_as
from toolref.wire.redaction import printable

RECENT: Final = 300.0  # seconds a version said (an answer's, a refusal's) is written to
HIGHEST: Final = max(VERSIONS)  # the highest a sender of this SDK writes
LOWEST: Final = min(VERSIONS)
SHOWN: Final = 200  # characters of a peer's text (detail, request id) a warning shows


class Said:
    """The versions one receiver (an endpoint, a gateway) said, each with when it last did."""

    __slots__ = ("_at", "_highest")

    def __init__(self, highest: int = HIGHEST) -> None:
        """`highest`: the highest version this sender writes (a sender of an older SDK's
        rule, as the JS SDK's tests replay it, passes its own)."""
        if highest not in VERSIONS:
            raise ValueError(f"a sender of edits version {highest}: there are {VERSIONS}")
        self._at: dict[int, float] = {}  # version -> when it was last said
        self._highest = highest

    def said(self, version: int | None, now: float) -> None:
        """`version` said at `now` (an answer's `Toolref-Edits`; None, or below every
        version of edits: nothing said). One above the highest written counts as it."""
        if version is not None and version >= LOWEST:
            self._at[min(version, self._highest)] = now

    def unreadable(self, version: int, now: float) -> bool:
        """An edit written for `version` was refused 400 `malformed-body`: the receiver
        reads less than its bytes (`wire.written_as(version)`), so the version below them is
        said. False: there is none (the sender's own fault, not a rollback)."""
        lower = written_as(min(version, self._highest)) - 1
        if lower < LOWEST:
            return False
        self.said(lower, now)
        return True

    def version(self, now: float) -> int | None:
        """The version to write (the module docstring); None while none was said."""
        if not self._at:
            return None
        recent = [v for v, at in self._at.items() if now - at < RECENT]
        if not recent:
            return max(self._at, key=self._at.__getitem__)
        lowest = min(recent)
        highest = max(recent)
        return lowest if written_as(lowest) < written_as(highest) else highest


def unreadable_said(
    endpoint: str,
    version: int,
    written: int | None,
    detail: object,
    request_id: str | None,
    *,
    status: int = 400,
) -> str:
    """What a sender says once `endpoint` refused an edit written for `version` `status`
    (400; a middleware's 415 naming it) `malformed-body` (the problem's `detail`, shown when
    it is text) and the version stepped down to `written` (None: none lower, edits paused).
    A rollback explains it; else the sender wrote bytes its receiver cannot read, a bug the
    resend hides from the app. The receiver's text shown as `printable` shows a peer's
    (escaped, at most `SHOWN` characters). Linear in the texts."""
    after = (
        f"its requests are now written for version {written}"
        if written is not None
        else "no version is lower: edits paused for it a while, requests go as they are"
    )
    said = printable(detail if isinstance(detail, str) else "no detail", SHOWN)
    named = printable(request_id if request_id is not None else "none given: note the time", SHOWN)
    return (
        f"toolref: {endpoint} refused an edit written for edits version {version} as unreadable "
        f"({status} malformed-body: {said}; request id {named}); {after}. Expected only after its "
        "receiver was rolled back to an older toolref: if the backend was not rolled back, "
        "report this with the request id"
    )
