"""An ACP agent's tool loop: a streamed model response becomes minimal `session/update`s.

A scripted Anthropic stream (the shape `client.messages.stream()` yields) goes through the
`ToolBuffer`; each call is announced with `tool_call` as soon as it starts, its arguments
appear as they stream (coalesced), and once complete the tool runs and reports its result.
A `todo_write` call becomes a `plan`. Notifications go to stdout as JSON-RPC lines; the byte
counters go to stderr.

    python examples/acp_agent.py                 # minimal updates
    python examples/acp_agent.py --full-objects  # every update carries the whole call
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolref.acp import (
    ToolCallStatus,
    ToolCallTracker,
    jsonrpc,
    locations_for,
    title_for,
    tool_kind,
)
from toolref.streaming import (
    AnthropicAdapter,
    ArgumentsProgress,
    CallCompleted,
    CallFailed,
    CallStarted,
    ToolBuffer,
    ToolCall,
    ToolEvent,
)

HERE = Path(__file__).resolve()
TODOS = {
    "todos": [
        {"content": "Read the example", "status": "completed", "activeForm": "Reading"},
        {"content": "Explain the tool loop", "status": "in_progress", "activeForm": "Explaining"},
        {"content": "Suggest a test", "status": "pending", "activeForm": "Suggesting"},
    ]
}


def model_stream(path: Path) -> Iterator[dict[str, Any]]:
    """What the model streams: a sentence, a read_file call and a todo_write call, with the
    arguments cut into small fragments as Anthropic sends them."""
    yield {"type": "message_start", "message": {"id": "msg_example", "content": []}}
    calls = [
        ("toolu_read_0001", "read_file", {"path": str(path), "line": 0}),
        ("toolu_todo_0002", "todo_write", TODOS),
    ]
    for index, (call_id, name, arguments) in enumerate(calls):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        yield {"type": "content_block_start", "index": index, "content_block": block}
        text = json.dumps(arguments)
        for at in range(0, len(text), 12):
            delta = {"type": "input_json_delta", "partial_json": text[at : at + 12]}
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        yield {"type": "content_block_stop", "index": index}
    yield {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}
    yield {"type": "message_stop"}


def run_tool(call: ToolCall) -> str:
    """The tools this agent has."""
    arguments = call.arguments or {}
    if call.name == "read_file":
        lines = Path(arguments["path"]).read_text().splitlines()
        return "\n".join(lines[:20])
    if call.name == "todo_write":
        return f"{len(arguments['todos'])} todos recorded"
    raise ValueError(f"unknown tool {call.name!r}")


def serve(tracker: ToolCallTracker, events: Iterator[dict[str, Any]]) -> None:
    adapter, buffer = AnthropicAdapter(), ToolBuffer()  # progress throttled to 50 ms
    for event in events:
        for chunk in adapter.feed(event):
            for happened in buffer.feed(chunk):
                react(tracker, happened)
        tracker.due()  # updates held longer than the window go out
    for chunk in adapter.end():
        for happened in buffer.feed(chunk):
            react(tracker, happened)
    buffer.close()
    tracker.flush()


def react(tracker: ToolCallTracker, happened: ToolEvent) -> None:
    if isinstance(happened, CallStarted) and happened.id and happened.name:
        tracker.start(happened.id, happened.name, kind=tool_kind(happened.name))
    elif isinstance(happened, ArgumentsProgress) and happened.id and happened.value:
        tracker.update(happened.id).raw_input(happened.value).send()  # coalesced
    elif isinstance(happened, CallCompleted):
        finish(tracker, happened.call)
    elif isinstance(happened, CallFailed):
        call = happened.call
        tracker.update(call.id).status("failed").text(f"not run: {call.error}").send()


def finish(tracker: ToolCallTracker, call: ToolCall) -> None:
    arguments = call.arguments or {}
    started = tracker.update(call.id).title(title_for(call.name, arguments))
    started.raw_input(arguments).set_locations(locations_for(arguments))
    started.status(ToolCallStatus.IN_PROGRESS).send()
    if call.name == "todo_write":
        tracker.plan(arguments)
    try:
        result = run_tool(call)
    except (OSError, ValueError, KeyError) as exc:
        tracker.update(call.id).status("failed").text(f"error: {exc}").send()
        return
    tracker.update(call.id).text(result).raw_output({"result": result}).status("completed").send()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--full-objects", action="store_true", help="compatibility mode")
    parser.add_argument("--window", type=float, default=0.0, help="coalescing window, s")
    options = parser.parse_args(argv)

    def emit(notification: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(jsonrpc(notification), separators=(",", ":")) + "\n")

    tracker = ToolCallTracker(
        "sess_example", window=options.window, full_objects=options.full_objects, sink=emit
    )
    started = time.monotonic()
    serve(tracker, model_stream(HERE))
    sys.stdout.flush()
    saved = 1 - tracker.bytes_sent / tracker.bytes_full if tracker.bytes_full else 0.0
    print(
        f"{tracker.notifications} notifications, {tracker.bytes_sent} bytes of updates "
        f"({tracker.bytes_full} as full objects, {saved:.0%} saved) "
        f"in {time.monotonic() - started:.3f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
