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
from toolref.edits.wire import VERSION
from toolref.formats import Format
from toolref.sending.editor import Editor
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


def edit_uploads(trace: Trace, *, guarded: bool = True, version: int = VERSION) -> list[bytes]:
    """The bodies a client sends as edits (`Editor`, the relay's and the SDK's), one request
    per model call, against a receiver that confirms every recipe: size-guarded (each new
    segment compressed alone, the default) or not (against the conversation); of `version`
    (4: no brotli records)."""
    fmt, messages, cuts = turns_of(trace)
    del fmt
    editor = Editor(size_guard=guarded, version=version)
    bodies = []
    for cut in cuts:
        edit = editor.prepare([], _bytes(messages[:cut]), "messages")
        assert edit is not None
        bodies.append(edit.body)
        editor.confirm(edit, edit.ref)
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


EDITS_ROW = "edits"  # size-guarded, what clients send by default
OPEN_ROW = "edits, unguarded"  # compressed against the conversation (`--no-size-guard`)


def measure(trace: Trace) -> Upload:
    raw, refs = requests(trace)
    sizes = {name: f(raw, refs) for name, f in METHODS.items()}
    sizes[EDITS_ROW] = sum(map(len, edit_uploads(trace)))
    sizes[OPEN_ROW] = sum(map(len, edit_uploads(trace, guarded=False)))
    return Upload(trace.name, len(raw), sizes, len(trace.messages))


def run(traces: list[Trace]) -> Section:
    uploads = [measure(trace) for trace in traces]
    longest = max(uploads, key=lambda u: u.sizes["raw"])
    columns = [*METHODS, EDITS_ROW, OPEN_ROW]
    rows = [
        [u.trace, str(u.messages), str(u.requests)] + [f"{u.sizes[name]:,}" for name in columns]
        for u in uploads
    ]
    delta = "zstd + previous as dictionary"
    long = [u for u in uploads if u.messages >= 100]
    least = min(long, key=lambda u: u.sizes["raw"] / u.sizes[EDITS_ROW]) if long else None
    below_raw = least.sizes["raw"] / least.sizes[EDITS_ROW] if least else math.inf
    open_worst = max(uploads, key=lambda u: u.sizes[OPEN_ROW] / u.sizes[delta])
    against_delta = open_worst.sizes[OPEN_ROW] / open_worst.sizes[delta]
    return Section(
        title="Bandwidth",
        intro=(
            "Bytes a chat client uploads over each shared conversation, sending one request per "
            "model call with the whole history so far (request bodies only, in every column). "
            "`zstd + previous as dictionary` compresses each request against the one before "
            "(the delta compression of RFC 9842, the strongest thing a client could do alone); "
            "`refs` sends a payload in full once, then as a protocol-2 marker; zstd at level "
            f"{LEVEL}, gzip at 6. `{EDITS_ROW}` is what the SDKs and the relay send "
            "(`toolref.sending.editor.Editor`, against a receiver that confirms each recipe): "
            "each request an edit of the one before, new segments each compressed alone (the "
            f'size guard, docs/reliability.md "Sizes"); `{OPEN_ROW}` compresses them against '
            "the conversation (`--no-size-guard`). Request heads are left out (docs/benchmarks.md, "
            '"Any conversation, any replica", counts them).'
        ),
        header=["trace", "messages", "requests", *columns],
        rows=rows,
        figures={
            "edits_vs_zstd_longest": longest.sizes["zstd"] / longest.sizes[EDITS_ROW],
            "unguarded_vs_delta_worst": against_delta,
            "raw_vs_edits_least": below_raw,
        },
        verdicts=[
            f"on the longest trace ({longest.trace}) edits upload "
            f"{longest.sizes['zstd'] / longest.sizes[EDITS_ROW]:.1f}x less than zstd alone, "
            f"{longest.sizes['raw'] / longest.sizes[EDITS_ROW]:.0f}x less than raw",
            f"on every trace of 100 messages or more, edits upload at least {below_raw:.0f}x "
            f"less than raw resend (least: {least.trace if least else 'none'}; the 100x the "
            "history refs of 0.2 reached compressed new messages against the conversation, "
            "which the size guard no longer does: unguarded, "
            f"{least.sizes['raw'] / least.sizes[OPEN_ROW] if least else math.inf:.0f}x)",
            f"unguarded, edit bodies are at most {against_delta:.2f}x what zstd with the previous "
            f"request does (worst: {open_worst.trace}); the size guard's cost over them is "
            '"The size guard\'s cost" below, and what a turn costs with its head in "Any '
            'conversation, any replica"',
        ],
    )
