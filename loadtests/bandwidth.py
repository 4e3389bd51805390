"""Bandwidth: what a chat client uploads over a whole conversation, resending the history
every turn, with each thing a user could do instead of refs."""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zstandard

from loadtests.report import Section
from loadtests.traces import Trace
from toolref import formats
from toolref.formats import Format
from toolref.history import DICTIONARY_LEVEL
from toolref.sending.rewrite import rewrite
from toolref.sending.upload import Turn, prepare
from toolref.wire.canonical import digest_of
from toolref.wire.encoding import dumps_json

LEVEL = 3  # zstd's default level, what an HTTP client would use


def _bytes(messages: Sequence[Any]) -> bytes:
    return dumps_json({"messages": messages})


_WIRE = {
    "openai-chat": ("role", "content", "tool_calls", "tool_call_id", "name"),
    "anthropic": ("role", "content"),
}
_CALL = ("id", "type", "function")


def on_the_wire(message: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The members a client sends to the model API: the traces also hold what their
    recorders kept (responses, costs, timings), which no client resends."""
    fields = _WIRE.get(fmt)
    if fields is None:
        return message
    sent = {k: v for k, v in message.items() if k in fields and v is not None}
    if isinstance(sent.get("tool_calls"), list):
        sent["tool_calls"] = [
            {k: v for k, v in call.items() if k in _CALL} for call in sent["tool_calls"]
        ]
    return sent


def turns_of(trace: Trace) -> tuple[Format, list[dict[str, Any]], list[int]]:
    fmt = formats.detect(trace.messages)
    messages = [on_the_wire(m, fmt.name) for m in trace.messages]
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    return fmt, messages, cuts


def history_uploads(trace: Trace, *, compress: bool | None = True) -> list[bytes]:
    """The bodies `ToolReferenceManager` sends with history refs (`upload.prepare`, the
    function the manager itself calls), against a server that confirms every head it is
    asked to keep and holds every payload sent before. `compress` as the manager's: True,
    the client knows from the first request that the server reads zstd (as the zstd rows
    assume); None, once the server has confirmed a history; False, never."""
    fmt, messages, cuts = turns_of(trace)
    confirmed: dict[str, int] = {}
    known: set[str] = set()
    bodies = []
    for cut in cuts:
        history = messages[:cut]
        outgoing = rewrite(history, fmt, known)
        turn = Turn(
            {"messages": history}, "messages", history, outgoing.messages, fmt, outgoing.refs
        )
        known_zstd = compress if compress is not None else bool(confirmed)
        upload = prepare(turn, confirmed, keep=True, compress=known_zstd)
        bodies.append(upload.content)
        if upload.head is not None:
            confirmed[upload.head] = upload.length
        known.update(outgoing.refs.values())
    return bodies


def requests(trace: Trace) -> tuple[list[bytes], list[bytes]]:
    """The request bodies of the conversation, raw and with refs: one request per model
    call (before each assistant message), carrying the history so far. With refs, a tool
    payload is a marker once an earlier request has carried it (the registry then holds it)."""
    fmt, messages, cuts = turns_of(trace)
    raw: list[bytes] = []
    with_refs: list[bytes] = []
    known: dict[str, str] = {}
    for cut in cuts:
        history = messages[:cut]
        raw.append(_bytes(history))
        found = formats.scan(history, fmt)
        refs = {p.key: known[p.key] for p in found.complete if p.key in known}
        with_refs.append(_bytes(formats.replace(history, found, refs)))
        for pair in found.complete:
            known.setdefault(pair.key, str(digest_of(pair.invocation()).ref))
    return raw, with_refs


def _zstd(bodies: list[bytes]) -> int:
    compressor = zstandard.ZstdCompressor(level=LEVEL)
    return sum(len(compressor.compress(body)) for body in bodies)


def _zstd_delta(bodies: list[bytes]) -> int:
    """Each request compressed with the previous one as a raw-content dictionary
    (RFC 9842 compression dictionary transport)."""
    total = 0
    previous = b""
    for body in bodies:
        if previous:
            dictionary = zstandard.ZstdCompressionDict(
                previous, dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
            compressor = zstandard.ZstdCompressor(level=LEVEL, dict_data=dictionary)
        else:
            compressor = zstandard.ZstdCompressor(level=LEVEL)
        total += len(compressor.compress(body))
        previous = body
    return total


@dataclass(frozen=True, slots=True)
class Upload:
    trace: str
    requests: int
    sizes: dict[str, int]
    messages: int


METHODS: dict[str, Callable[[list[bytes], list[bytes]], int]] = {
    "raw": lambda raw, refs: sum(map(len, raw)),
    "gzip": lambda raw, refs: sum(len(gzip.compress(b, 6)) for b in raw),
    "zstd": lambda raw, refs: _zstd(raw),
    "zstd + previous as dictionary": lambda raw, refs: _zstd_delta(raw),
    "refs": lambda raw, refs: sum(map(len, refs)),
    "refs + zstd": lambda raw, refs: _zstd(refs),
    "refs + zstd + previous as dictionary": lambda raw, refs: _zstd_delta(refs),
}


HISTORY_ROW = "history refs + zstd"
COLD = "cold"  # the same from a manager that has not yet seen the server read zstd


def measure(trace: Trace) -> Upload:
    raw, refs = requests(trace)
    sizes = {name: f(raw, refs) for name, f in METHODS.items()}
    sizes[HISTORY_ROW] = sum(map(len, history_uploads(trace)))
    sizes[COLD] = sum(map(len, history_uploads(trace, compress=None)))
    return Upload(trace.name, len(raw), sizes, len(trace.messages))


def run(traces: list[Trace]) -> Section:
    uploads = [measure(trace) for trace in traces]
    longest = max(uploads, key=lambda u: u.sizes["raw"])
    factor = longest.sizes["zstd"] / longest.sizes["refs + zstd"]
    columns = [*METHODS, HISTORY_ROW]
    rows = [
        [u.trace, str(u.messages), str(u.requests)] + [f"{u.sizes[name]:,}" for name in columns]
        for u in uploads
    ]
    delta = "zstd + previous as dictionary"
    worst = max(uploads, key=lambda u: u.sizes[HISTORY_ROW] / u.sizes[delta])
    against_delta = worst.sizes[HISTORY_ROW] / worst.sizes[delta]
    long = [u for u in uploads if u.messages >= 100]
    least = min(long, key=lambda u: u.sizes["raw"] / u.sizes[HISTORY_ROW]) if long else None
    below_raw = least.sizes["raw"] / least.sizes[HISTORY_ROW] if least else math.inf
    verdict = "PASS" if factor >= 20 else "FAIL"
    return Section(
        title="Bandwidth",
        intro=(
            "Bytes a chat client uploads over each shared conversation, sending one request per "
            "model call with the whole history so far (request bodies only, in every column). "
            "`zstd + previous as dictionary` compresses each request against the one before "
            "(the delta compression of RFC 9842, the strongest thing a client could do without "
            "refs); `refs` sends a payload in full once, then as a marker; zstd at level "
            f"{LEVEL}, gzip at 6. `{HISTORY_ROW}` is what `ToolReferenceManager` sends with "
            "history refs (`toolref.sending.upload.prepare`), against a server that confirms each "
            "history: the first request whole (zstd), then only the new messages, compressed "
            f"at level {DICTIONARY_LEVEL} against the history they continue, whose ref travels "
            "in the `Toolref-History` header (as RFC 9842 names its dictionary in "
            "`Available-Dictionary`)."
        ),
        header=["trace", "messages", "requests", *columns],
        rows=rows,
        figures={
            "refs_zstd_vs_zstd": factor,
            "history_vs_delta_worst": against_delta,
            "raw_vs_history_least": below_raw,
        },
        verdicts=[
            f"{verdict}: on the longest trace ({longest.trace}) refs + zstd upload "
            f"{factor:.1f}x less than zstd alone (target 20x)",
            "on the longest trace, zstd with the previous request as dictionary uploads "
            f"{longest.sizes['refs + zstd'] / longest.sizes[delta]:.0f}x "
            "less than refs + zstd: the history only grows, so each request is nearly all "
            "dictionary; refs combine with it "
            f"({longest.sizes['refs + zstd + previous as dictionary']:,} bytes)",
            f"{'PASS' if against_delta <= 1 else 'FAIL'}: history refs + zstd upload at most "
            f"{against_delta:.3f}x what zstd with the previous request as dictionary does, on "
            f"every trace (worst: {worst.trace}; target <= 1)",
            f"{'PASS' if below_raw >= 100 else 'FAIL'}: on every trace of 100 messages or more, "
            f"history refs + zstd upload at least {below_raw:.0f}x less than raw resend "
            f"(least: {least.trace if least else 'none'}; target 100x)",
            "a new `ToolReferenceManager` (default `compress=None`) sends its very first request "
            "uncompressed, before the server has shown it reads zstd: a fresh manager per "
            "conversation would upload "
            + ", ".join(f"{u.sizes[COLD] / u.sizes[HISTORY_ROW]:.2f}x" for u in uploads)
            + " the row above (pass `compress=True` when the server is known)",
        ],
    )
