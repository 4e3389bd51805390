"""What each LLM request cost on the wire, for a person to see: one line per turn, each
agent's totals, the `Toolref-Savings` answer header, and Prometheus counters.

Like for like, both sides count a request as it goes on the wire: its header lines
(`name: value` and the line end, each) and its body. An edit carries the agent's headers
inside its body, so counting bodies alone compared the agent's body with the relay's
headers and body (a 72-byte request read "72 B -> 293 B, 0.2x").

raw: the agent's request to the relay: its header lines and its body as sent (the
    compressed size when the agent compressed its body, as Codex does).
inflated: the agent's body decoded: the JSON it built.
wire: the relay's requests for it: every attempt (a resend after a recipe or pieces the
    gateway no longer holds) and the fallback, if it was used.
ratio: raw / wire, told only when the relay sent less ("not shrunk" otherwise: a request
    too small to shrink goes as it came, and then costs its toolref key's line more).
A WebSocket message has no header lines: its bytes on either side.

Totals are kept per agent and upstream (`Who`): the agent named by its User-Agent's product
name (`claude-cli`), every conversation it sent there since the relay started. Only a turn
answered 2xx counts in the bytes and ratio: a turn the gateway, the provider or the relay
refused reached no model, and its small wire size saved nothing (a session of failures
read 26x while nothing reached the provider). Each turn's line shows its status.

Sizes read in binary units, as every size toolref shows (its limits: 64 MiB): 1 KiB is
1024 bytes; `size` is their one home in Python (the web demo's `formatBytes` follows it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sized
from dataclasses import dataclass, field
from typing import Final, Literal

from toolref.asgi.hops import Pairs, first, savings_value
from toolref.kit.process_counters import counter

Route = Literal["gateway", "fallback", "refused"]

UPLOAD_BYTES: Final = counter(
    "toolref_upload_bytes_total",
    "LLM requests through the relay answered 2xx, every agent and upstream: raw (the "
    "agent's, header lines and body as sent), inflated (the body decoded), wire (the relay's, "
    "header lines and body, resends included)",
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
_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB")
_PRODUCT: Final = re.compile(r"[A-Za-z0-9._-]{1,40}")
UNNAMED: Final = "an agent without a User-Agent"
OTHERS: Final = "others"  # past MAX_TOTALS agents and upstreams
MAX_TOTALS: Final = 64  # any local process names its agent and upstream: bounded


def size(count: int) -> str:
    """`count` bytes for a person: `999 B`, `86.0 KiB`, `1.1 MiB` (units of 1024, one
    decimal, a half rounded up: tenths counted as an integer, as the demo's `formatBytes`
    counts them, so that both read the same)."""
    value, unit = float(count), 0
    while unit < len(_UNITS) - 1 and _tenths(value) >= 10240:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{count} B"
    tenths = _tenths(value)
    return f"{tenths // 10}.{tenths % 10} {_UNITS[unit]}"


def _tenths(value: float) -> int:
    return math.floor(value * 10 + 0.5)


def header_bytes(pairs: Iterable[tuple[Sized, Sized]]) -> int:
    """The bytes of header lines on the wire (HTTP/1.1: `name: value` and CRLF, each), of
    names and values as text (latin-1, as ASGI and httpx decode them) or bytes."""
    return sum(len(name) + len(value) + 4 for name, value in pairs)


@dataclass(frozen=True, slots=True)
class Who:
    """Whose turns a total counts: an agent (its User-Agent's product name) and the
    upstream it sent them to."""

    agent: str
    upstream: str

    def __str__(self) -> str:
        return f"{self.agent} -> {self.upstream}"


def who(headers: Pairs, upstream: str) -> Who:
    """The agent of a request with `headers` (`claude-cli` of `claude-cli/2.1.330 (external,
    cli)`; the product name only, never the rest of the header) sending to `upstream`."""
    agent = first(headers, "user-agent")
    product = agent.split("/", 1)[0].strip() if agent else ""
    named = _PRODUCT.fullmatch(product) is not None
    return Who(product if named else UNNAMED, upstream)


@dataclass(frozen=True, slots=True)
class Upload:
    """The bytes of one LLM request (see the module docstring)."""

    raw: int
    inflated: int
    wire: int
    route: Route = "gateway"
    status: int = 200  # the answer's, as the agent gets it
    context: Context | None = None  # what the gateway's context editing did (None: nothing)

    @property
    def ratio(self) -> float:
        return self.raw / self.wire if self.wire else 1.0

    @property
    def ok(self) -> bool:
        """Answered 2xx: the request reached the provider and succeeded (a turn the relay
        refused itself never did)."""
        return 200 <= self.status < 300 and self.route != "refused"


@dataclass(frozen=True, slots=True)
class Context:
    """What the gateway's context editing did to a turn (its `Toolref-Context` header):
    results replaced by their summaries, estimated input tokens saved, and whether this
    turn replaced new ones (the provider's prompt cache written again)."""

    cleared: int
    saved: int
    rewrote: bool


def context_of(value: str | None) -> Context | None:
    """The `Toolref-Context` value read (None when absent or not the gateway's form)."""
    if not value:
        return None
    found: dict[str, int] = {}
    for part in value.split(";"):
        name, _, number = part.strip().partition("=")
        if number.isascii() and number.isdigit() and len(number) <= 15:
            found[name] = int(number)
    if "cleared" not in found or "saved" not in found:
        return None
    return Context(found["cleared"], found["saved"], bool(found.get("rewrote")))


@dataclass(slots=True)
class Tally:
    """Turns so far (one agent and upstream's, or every one's; one event loop updates it)."""

    turns: int = 0
    raw: int = 0
    inflated: int = 0
    wire: int = 0
    fallbacks: int = 0
    refused: int = 0
    failed: int = 0  # answered other than 2xx (refused ones included): no bytes counted
    tokens_saved: int = 0  # estimated, by the gateway's context editing

    @property
    def ratio(self) -> float:
        return self.raw / self.wire if self.wire else 1.0

    def add(self, upload: Upload) -> int:
        """Count `upload` (its bytes only when it was answered 2xx); its turn number."""
        self.turns += 1
        self.fallbacks += upload.route == "fallback"
        self.refused += upload.route == "refused"
        if not upload.ok:
            self.failed += 1
            return self.turns
        self.raw += upload.raw
        self.inflated += upload.inflated
        self.wire += upload.wire
        self.tokens_saved += upload.context.saved if upload.context is not None else 0
        return self.turns


@dataclass(slots=True)
class Totals:
    """Each agent and upstream's `Tally` (`each`, at most `MAX_TOTALS`, then one for
    `OTHERS`), every one's together (`all`), and the Prometheus counters."""

    each: dict[Who, Tally] = field(default_factory=dict)
    all: Tally = field(default_factory=Tally)

    def add(self, whose: Who, upload: Upload) -> tuple[int, Tally]:
        """Count `upload`: the turn's number for `whose`, and `whose` tally."""
        if whose not in self.each and len(self.each) >= MAX_TOTALS:
            whose = Who(OTHERS, OTHERS)
        tally = self.each.setdefault(whose, Tally())
        self.all.add(upload)
        TURNS.inc(upload.route)
        if upload.ok:
            UPLOAD_BYTES.inc("raw", upload.raw)
            UPLOAD_BYTES.inc("inflated", upload.inflated)
            UPLOAD_BYTES.inc("wire", upload.wire)
        else:
            FAILED.inc(str(upload.status))
        return tally.add(upload), tally


def shrunk(raw: int, wire: int) -> str:
    """raw / wire for a person: `38.3x`; `not shrunk` when the relay sent as much or more."""
    if not wire:
        return "nothing sent"
    return f"{raw / wire:.1f}x" if wire < raw else "not shrunk"


def turn_line(whose: Who, number: int, upload: Upload, tally: Tally) -> str:
    """The line of `whose` turn `number`, with `whose` totals so far (`tally`)."""
    where = "  (fallback: gateway unreachable)" if upload.route == "fallback" else ""
    head = f"toolref relay: {whose} turn {number}  {upload.status}  agent sent {size(upload.raw)}"
    if upload.route == "refused":
        head += "  refused by the relay, not counted"
    elif not upload.ok:
        head += f"  sent {size(upload.wire)}  failed, not counted{where}"
    else:
        head += f"  sent {size(upload.wire)}  {shrunk(upload.raw, upload.wire)}{where}"
    if upload.ok and upload.context is not None and upload.context.cleared:
        found = upload.context
        rewrote = ", the provider's cache written again" if found.rewrote else ""
        head += (
            f"  context: {found.cleared} old results summarized, ~{found.saved} tokens "
            f"saved{rewrote}"
        )
    return f"{head}  (its conversations so far: {session(tally)})"


def session(tally: Tally) -> str:
    counted = tally.turns - tally.failed
    failed = f", {tally.failed} failed" if tally.failed else ""
    turns = "turn" if counted == 1 else "turns"
    tokens = f", ~{tally.tokens_saved} input tokens saved" if tally.tokens_saved else ""
    return (
        f"agent sent {size(tally.raw)}, sent {size(tally.wire)}, "
        f"{shrunk(tally.raw, tally.wire)} over {counted} answered {turns}{failed}{tokens}"
    )


def summary(whose: Who, tally: Tally) -> str:
    """The line printed for `whose` when the relay stops."""
    extra = ""
    if tally.fallbacks or tally.refused:
        extra = f"; {tally.fallbacks} went to the fallback, {tally.refused} refused"
    return (
        f"toolref relay: {whose}, every conversation since the relay started: "
        f"{session(tally)} (agent bodies inflated: {size(tally.inflated)}){extra}"
    )


def savings_header(upload: Upload) -> str:
    """The `Toolref-Savings` value of `upload` (`toolref.asgi.hops.savings_value`)."""
    saved = upload.context.saved if upload.context is not None else None
    return savings_value(upload.raw, upload.wire, saved)
