"""What each LLM request cost on the wire, for a person to see: one line per turn, a
session summary, the `Toolref-Savings` answer header, and Prometheus counters.

raw: the bytes the agent put on the wire to the relay (the compressed size when the agent
    compressed its body, as Codex does).
inflated: the same body decoded: the JSON the agent built.
wire: the bytes the relay put on the wire for it: every attempt (a resend after an expired
    ref or history, the retry after a 413) and the fallback, if it was used.
ratio: raw / wire.

Only a turn answered 2xx counts in the session's bytes and ratio: a turn the gateway, the
provider or the relay refused reached no model, and its small wire size saved nothing (a
session of failures read 26x while nothing reached the provider). Each turn's line shows
its status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from toolref.receiving.hops import savings_value
from toolref.receiving.metrics import counter

Route = Literal["gateway", "fallback", "refused"]

UPLOAD_BYTES: Final = counter(
    "toolref_upload_bytes_total",
    "Request bytes of LLM calls through the relay answered 2xx: raw (as the agent sent "
    "them), inflated (decoded), wire (as the relay sent them, resends included)",
    "kind",
)
TURNS: Final = counter(
    "toolref_relay_turns_total",
    "LLM requests through the relay, by where they went (gateway, fallback, refused)",
    "route",
)
FAILED: Final = counter(
    "toolref_relay_failed_turns_total",
    "LLM requests through the relay answered other than 2xx, by status (their bytes are not "
    "in toolref_upload_bytes_total)",
    "status",
)
_UNITS: Final = ("B", "KB", "MB", "GB", "TB")


@dataclass(frozen=True, slots=True)
class Upload:
    """The bytes of one LLM request (see the module docstring)."""

    raw: int
    inflated: int
    wire: int
    route: Route = "gateway"
    status: int = 200  # the answer's, as the agent gets it

    @property
    def ratio(self) -> float:
        return self.raw / self.wire if self.wire else 1.0

    @property
    def ok(self) -> bool:
        """Answered 2xx: the request reached the provider and succeeded (a turn the relay
        refused itself never did)."""
        return 200 <= self.status < 300 and self.route != "refused"


@dataclass(slots=True)
class Tally:
    """The session so far (one event loop updates it)."""

    turns: int = 0
    raw: int = 0
    inflated: int = 0
    wire: int = 0
    fallbacks: int = 0
    refused: int = 0
    failed: int = 0  # answered other than 2xx (refused ones included): no bytes counted

    @property
    def ratio(self) -> float:
        return self.raw / self.wire if self.wire else 1.0

    def add(self, upload: Upload) -> int:
        """Count `upload` (here and in the counters; its bytes only when it was answered
        2xx); its turn number."""
        self.turns += 1
        self.fallbacks += upload.route == "fallback"
        self.refused += upload.route == "refused"
        TURNS.inc(upload.route)
        if not upload.ok:
            self.failed += 1
            FAILED.inc(str(upload.status))
            return self.turns
        self.raw += upload.raw
        self.inflated += upload.inflated
        self.wire += upload.wire
        UPLOAD_BYTES.inc("raw", upload.raw)
        UPLOAD_BYTES.inc("inflated", upload.inflated)
        UPLOAD_BYTES.inc("wire", upload.wire)
        return self.turns


def size(count: int) -> str:
    """`count` bytes for a person: 88.1 KB (units of 1000, as KB and MB say)."""
    value, unit = float(count), 0
    while value >= 1000 and unit < len(_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def turn_line(number: int, upload: Upload, tally: Tally) -> str:
    where = {"gateway": "", "fallback": "  (fallback: gateway unreachable)", "refused": ""}
    head = f"toolref relay: turn {number}  {upload.status}  agent sent {size(upload.raw)}"
    if upload.route == "refused":
        head += "  refused by the relay, not counted"
    elif not upload.ok:
        head += f"  sent {size(upload.wire)}  failed, not counted{where[upload.route]}"
    else:
        head += f"  sent {size(upload.wire)}  {upload.ratio:.1f}x{where[upload.route]}"
    return f"{head}  (session: {session(tally)})"


def session(tally: Tally) -> str:
    ratio = f"{tally.ratio:.1f}x" if tally.wire else "nothing sent"
    counted = tally.turns - tally.failed
    failed = f", {tally.failed} failed" if tally.failed else ""
    return (
        f"agent sent {size(tally.raw)}, sent {size(tally.wire)}, {ratio} over {counted} "
        f"answered turns{failed}"
    )


def summary(tally: Tally) -> str:
    """The line printed when the relay stops."""
    extra = ""
    if tally.fallbacks or tally.refused:
        extra = f"; {tally.fallbacks} went to the fallback, {tally.refused} refused"
    return f"toolref relay: {session(tally)} (agent bodies inflated: {size(tally.inflated)}){extra}"


def savings_header(upload: Upload) -> str:
    """The `Toolref-Savings` value of `upload` (`toolref.receiving.hops.savings_value`)."""
    return savings_value(upload.raw, upload.wire)
