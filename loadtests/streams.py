"""Streaming ToolBuffer cost: adapter plus buffer per chunk, against `json.loads` of the
same SSE payloads (the decode every client pays anyway), on one 10,000-chunk response with
8 parallel calls streamed interleaved."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from loadtests.report import Section
from loadtests.timing import interleaved
from toolref.streaming import ToolBuffer, adapter_for
from toolref.wire.encoding import dumps_json

CHUNKS = 10_000
CALLS = 8


def _split(text: str, pieces: int) -> list[str]:
    return [text[n * len(text) // pieces : (n + 1) * len(text) // pieces] for n in range(pieces)]


def _fragments(total: int) -> list[tuple[int, str]]:
    """`total` (call, fragment) pairs of the calls' JSON arguments, a few tokens each,
    round-robin over the calls: the interleaved worst case."""
    parts = []
    for call in range(CALLS):
        pieces = total // CALLS + (call < total % CALLS)
        body = {"path": f"src/module_{call}.py", "content": "x = 1\n" * (pieces * 2)}
        parts.append(_split(json.dumps(body), pieces))
    out: list[tuple[int, str]] = []
    for step in range(max(len(p) for p in parts)):
        out.extend((call, p[step]) for call, p in enumerate(parts) if step < len(p))
    return out


def openai_chat() -> list[str]:
    envelope = {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_eb9dce56a8",
    }

    def event(call: dict[str, Any] | None, finish: str | None = None) -> str:
        delta = {"tool_calls": [call]} if call else {}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**envelope, "choices": [choice]})

    payloads = [
        event(
            {
                "index": call,
                "id": f"call_{call:024d}",
                "type": "function",
                "function": {"name": "write_file", "arguments": ""},
            }
        )
        for call in range(CALLS)
    ]
    payloads += [
        event({"index": call, "function": {"arguments": text}})
        for call, text in _fragments(CHUNKS - CALLS - 1)
    ]
    payloads.append(event(None, "tool_calls"))
    return payloads


def anthropic() -> list[str]:
    payloads = []
    fragments = _fragments(CHUNKS - 2 * CALLS - 2)
    for call in range(CALLS):  # Anthropic streams one block at a time
        block = {"type": "tool_use", "id": f"toolu_{call:024d}", "name": "write_file", "input": {}}
        payloads.append(
            _sse({"type": "content_block_start", "index": call, "content_block": block})
        )
        payloads += [
            _sse(
                {
                    "type": "content_block_delta",
                    "index": call,
                    "delta": {"type": "input_json_delta", "partial_json": text},
                }
            )
            for owner, text in fragments
            if owner == call
        ]
        payloads.append(_sse({"type": "content_block_stop", "index": call}))
    payloads.append(_sse({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}))
    payloads.append(_sse({"type": "message_stop"}))
    return payloads


STREAMS: dict[str, Callable[[], list[str]]] = {"openai_chat": openai_chat, "anthropic": anthropic}


def _sse(value: Any) -> str:
    return dumps_json(value).decode()  # compact, as providers send it


def decode(payloads: list[str]) -> list[Any]:
    return [json.loads(text) for text in payloads]


def consume(provider: str, events: list[dict[str, Any]]) -> int:
    adapter = adapter_for(provider)
    buffer = ToolBuffer()
    feed = buffer.feed
    for event in events:
        for chunk in adapter.feed(event):
            feed(chunk)
    for chunk in adapter.end():
        feed(chunk)
    calls = buffer.close()
    if len(calls) != CALLS or not all(call.runnable for call in calls):
        raise RuntimeError(f"the {provider} benchmark stream did not give {CALLS} calls")
    return len(calls)


def run(rounds: int = 5, min_time: float = 0.05) -> Section:
    rows = []
    figures = {}
    for provider, build in STREAMS.items():
        payloads = build()
        events = [json.loads(p) for p in payloads]
        timings = interleaved(
            {
                "decode": partial(decode, payloads),
                "buffer": partial(consume, provider, events),
            },
            rounds=rounds,
            min_time=min_time,
        )
        ratio = timings["buffer"].ratio(timings["decode"])
        figures[provider] = ratio
        per_chunk = timings["buffer"].seconds / len(payloads) * 1e6
        decoded = timings["decode"].seconds / len(payloads) * 1e6
        rows.append(
            [
                provider,
                f"{len(payloads):,}",
                f"{decoded:.2f} µs",
                f"{per_chunk:.2f} µs",
                f"{ratio:.3f}",
            ]
        )
    return Section(
        title="Streaming tool calls",
        intro=(
            f"One response of {CHUNKS:,} chunks carrying {CALLS} parallel `write_file` calls "
            "(OpenAI Chat interleaves the calls fragment by fragment; Anthropic streams one "
            "block after another). `decode` is `json.loads` of every SSE payload; `adapter + "
            "buffer` turns the decoded events into the 8 complete calls with a default "
            "`ToolBuffer` (progress events on). Ratio: adapter + buffer over decode, "
            "measured alternately in the same run."
        ),
        header=["provider", "chunks", "decode per chunk", "adapter + buffer per chunk", "ratio"],
        rows=rows,
        figures=figures,
        verdicts=[
            f"{name}: the buffer adds {value:.2f}x the decode cost "
            f"({'within' if value <= 1 else 'over'} the 1x budget)"
            for name, value in figures.items()
        ],
    )
