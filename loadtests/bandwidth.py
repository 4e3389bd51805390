"""Bandwidth: what a chat client uploads over a whole conversation, resending the history
every turn, with each thing a user could do instead of refs."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zstandard

from loadtests.report import Section
from loadtests.traces import Trace
from toolref import formats
from toolref.canonical import digest_of
from toolref.encoding import dumps_json

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


def requests(trace: Trace) -> tuple[list[bytes], list[bytes]]:
    """The request bodies of the conversation, raw and with refs: one request per model
    call (before each assistant message), carrying the history so far. With refs, a tool
    payload is a marker once an earlier request has carried it (the registry then holds it)."""
    fmt = formats.detect(trace.messages)
    messages = [on_the_wire(m, fmt.name) for m in trace.messages]
    cuts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
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


METHODS: dict[str, Callable[[list[bytes], list[bytes]], int]] = {
    "raw": lambda raw, refs: sum(map(len, raw)),
    "gzip": lambda raw, refs: sum(len(gzip.compress(b, 6)) for b in raw),
    "zstd": lambda raw, refs: _zstd(raw),
    "zstd + previous as dictionary": lambda raw, refs: _zstd_delta(raw),
    "refs": lambda raw, refs: sum(map(len, refs)),
    "refs + zstd": lambda raw, refs: _zstd(refs),
    "refs + zstd + previous as dictionary": lambda raw, refs: _zstd_delta(refs),
}


def measure(trace: Trace) -> Upload:
    raw, refs = requests(trace)
    return Upload(trace.name, len(raw), {name: f(raw, refs) for name, f in METHODS.items()})


def run(traces: list[Trace]) -> Section:
    uploads = [measure(trace) for trace in traces]
    longest = max(uploads, key=lambda u: u.sizes["raw"])
    factor = longest.sizes["zstd"] / longest.sizes["refs + zstd"]
    rows = [
        [u.trace, str(u.requests)] + [f"{u.sizes[name]:,}" for name in METHODS] for u in uploads
    ]
    verdict = "PASS" if factor >= 20 else "FAIL"
    return Section(
        title="Bandwidth",
        intro=(
            "Bytes a chat client uploads over each shared conversation, sending one request per "
            "model call with the whole history so far. `zstd + previous as dictionary` compresses "
            "each request against the one before (the delta compression of RFC 9842, the "
            "strongest thing a client could do without refs); `refs` sends a payload in full "
            f"once, then as a marker; zstd at level {LEVEL}, gzip at 6."
        ),
        header=["trace", "requests", *METHODS],
        rows=rows,
        figures={"refs_zstd_vs_zstd": factor},
        verdicts=[
            f"{verdict}: on the longest trace ({longest.trace}) refs + zstd upload "
            f"{factor:.1f}x less than zstd alone (target 20x)",
            "on the longest trace, zstd with the previous request as dictionary uploads "
            f"{longest.sizes['refs + zstd'] / longest.sizes['zstd + previous as dictionary']:.0f}x "
            "less than refs + zstd: the history only grows, so each request is nearly all "
            "dictionary; refs combine with it "
            f"({longest.sizes['refs + zstd + previous as dictionary']:,} bytes)",
        ],
    )
