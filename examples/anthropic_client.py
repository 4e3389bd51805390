"""A streamed tool-calling conversation through the official `anthropic` SDK, sent as edits.

The one change to a plain anthropic client is its HTTP client: `toolref.Transport` (and
`toolref.AsyncTransport`) send each request as an edit of the one before, once the backend
says it reads edits: what the backend holds by reference, only what changed inline. The
SDK, its `messages.stream()` helper and the backend's code are unchanged. The conversation
runs with `anthropic.Anthropic`, then `anthropic.AsyncAnthropic`, against
examples/llm_backend.py; the bytes sent are printed.

    python examples/anthropic_client.py --backend http://127.0.0.1:8001
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message, MessageParam, ToolParam, ToolResultBlockParam

import toolref

ROOT = Path(__file__).resolve().parents[1]
MODEL = "scripted-1"
SYSTEM = "You answer questions about a code repository."
TASKS = (
    "read client_sdk/toolref/sending/manager.py",
    "list client_sdk/toolref",
    "read client_sdk/toolref/sending/transport.py",
    "read docs/sdk.md",
)
TOOLS: list[ToolParam] = [
    {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository"),
        ("list_dir", "List a folder of the repository"),
    )
]


def run_tool(name: str, arguments: Any) -> str:
    """The tools, run by the client as an agent runs them: over this repository."""
    path = (ROOT / str(arguments["path"])).resolve()
    if not path.is_relative_to(ROOT):
        return "error: outside the repository"
    if name == "list_dir":
        return "\n".join(sorted(p.name for p in path.iterdir()))
    return path.read_text()


def results(message: Message) -> list[ToolResultBlockParam]:
    return [
        {
            "type": "tool_result",
            "tool_use_id": block.id,
            "content": run_tool(block.name, block.input),
        }
        for block in message.content
        if block.type == "tool_use"
    ]


def converse(client: anthropic.Anthropic, tasks: tuple[str, ...] = TASKS) -> list[MessageParam]:
    messages: list[MessageParam] = []
    for task in tasks:
        messages.append({"role": "user", "content": task})
        while True:  # until the model answers without calling a tool
            with client.messages.stream(
                model=MODEL, max_tokens=1024, system=SYSTEM, messages=messages, tools=TOOLS
            ) as stream:
                for _ in stream.text_stream:
                    pass  # a chat client would show the text as it comes
                reply = stream.get_final_message()
            messages.append({"role": "assistant", "content": reply.content})
            answers = results(reply)
            if not answers:
                break
            messages.append({"role": "user", "content": answers})
    return messages


async def aconverse(
    client: anthropic.AsyncAnthropic, tasks: tuple[str, ...] = TASKS
) -> list[MessageParam]:
    messages: list[MessageParam] = []
    for task in tasks:
        messages.append({"role": "user", "content": task})
        while True:
            async with client.messages.stream(
                model=MODEL, max_tokens=1024, system=SYSTEM, messages=messages, tools=TOOLS
            ) as stream:
                async for _ in stream.text_stream:
                    pass
                reply = await stream.get_final_message()
            messages.append({"role": "assistant", "content": reply.content})
            answers = results(reply)
            if not answers:
                break
            messages.append({"role": "user", "content": answers})
    return messages


def report(label: str, messages: list[MessageParam], savings: toolref.Savings) -> None:
    print(
        f"{label}: {len(messages)} messages in {savings.requests} requests; sent "
        f"{savings.sent_bytes:,} bytes instead of {savings.full_bytes:,} "
        f"({savings.ratio:.1f}x fewer); {savings.edits} requests continued as edits"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="http://127.0.0.1:8001")
    args = parser.parse_args()

    transport = toolref.Transport()
    with anthropic.Anthropic(
        base_url=args.backend,
        api_key="not-needed",
        http_client=httpx2.Client(transport=transport),
    ) as client:
        report("anthropic.Anthropic", converse(client), transport.manager.savings)

    async def run() -> None:
        transport = toolref.AsyncTransport()
        async with anthropic.AsyncAnthropic(
            base_url=args.backend,
            api_key="not-needed",
            http_client=httpx2.AsyncClient(transport=transport),
        ) as client:
            report("anthropic.AsyncAnthropic", await aconverse(client), transport.manager.savings)

    asyncio.run(run())


if __name__ == "__main__":
    main()
