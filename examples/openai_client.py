"""A streamed tool-calling conversation through the official `openai` SDK, sent as edits.

The one change to a plain openai client is its HTTP client: `toolref.Transport` (and
`toolref.AsyncTransport`) send each request as an edit of the one before, once the backend
says it reads edits: what the backend holds by reference, only what changed inline. The
SDK, its streams and the backend's code are unchanged. The conversation runs with
`openai.OpenAI`, then `openai.AsyncOpenAI`, against examples/llm_backend.py; the bytes sent
are printed.

    python examples/openai_client.py --backend http://127.0.0.1:8001
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import httpx2
import openai
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)

import toolref

ROOT = Path(__file__).resolve().parents[1]
MODEL = "scripted-1"
TASKS = (
    "read client_sdk/toolref/sending/manager.py",
    "list client_sdk/toolref",
    "read client_sdk/toolref/sending/transport.py",
    "read docs/sdk.md",
)
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name, description in (
        ("read_file", "Read a file of the repository"),
        ("list_dir", "List a folder of the repository"),
    )
]


def run_tool(name: str, arguments: str) -> str:
    """The tools, run by the client as an agent runs them: over this repository."""
    path = (ROOT / str(json.loads(arguments)["path"])).resolve()
    if not path.is_relative_to(ROOT):
        return "error: outside the repository"
    if name == "list_dir":
        return "\n".join(sorted(p.name for p in path.iterdir()))
    return path.read_text()


class Reply:
    """The assistant message a stream of `chat.completion.chunk`s spells out."""

    def __init__(self) -> None:
        self.text = ""
        self.calls: dict[int, ChatCompletionMessageFunctionToolCallParam] = {}

    def add(self, chunk: ChatCompletionChunk) -> None:
        for choice in chunk.choices:
            self.text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = self.calls.setdefault(
                    delta.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""

    def message(self) -> ChatCompletionAssistantMessageParam:
        message: ChatCompletionAssistantMessageParam = {
            "role": "assistant",
            "content": self.text or None,
        }
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return message

    def results(self) -> list[ChatCompletionToolMessageParam]:
        return [
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": run_tool(call["function"]["name"], call["function"]["arguments"]),
            }
            for call in (self.calls[i] for i in sorted(self.calls))
        ]


def converse(
    client: openai.OpenAI, tasks: tuple[str, ...] = TASKS
) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You answer questions about a code repository."}
    ]
    for task in tasks:
        messages.append({"role": "user", "content": task})
        while True:  # until the model answers without calling a tool
            reply = Reply()
            with client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, stream=True
            ) as stream:
                for chunk in stream:
                    reply.add(chunk)
            messages.append(reply.message())
            if not reply.calls:
                break
            messages.extend(reply.results())
    return messages


async def aconverse(
    client: openai.AsyncOpenAI, tasks: tuple[str, ...] = TASKS
) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": "You answer questions about a code repository."}
    ]
    for task in tasks:
        messages.append({"role": "user", "content": task})
        while True:
            reply = Reply()
            async with await client.chat.completions.create(
                model=MODEL, messages=messages, tools=TOOLS, stream=True
            ) as stream:
                async for chunk in stream:
                    reply.add(chunk)
            messages.append(reply.message())
            if not reply.calls:
                break
            messages.extend(reply.results())
    return messages


def report(
    label: str, messages: list[ChatCompletionMessageParam], savings: toolref.Savings
) -> None:
    print(
        f"{label}: {len(messages)} messages in {savings.requests} requests; sent "
        f"{savings.sent_bytes:,} bytes instead of {savings.full_bytes:,} "
        f"({savings.ratio:.1f}x fewer); {savings.edits} requests continued as edits"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="http://127.0.0.1:8001")
    args = parser.parse_args()
    base_url = args.backend + "/v1"

    transport = toolref.Transport()
    with openai.OpenAI(
        base_url=base_url, api_key="not-needed", http_client=httpx2.Client(transport=transport)
    ) as client:
        report("openai.OpenAI", converse(client), transport.manager.savings)

    async def run() -> None:
        transport = toolref.AsyncTransport()
        async with openai.AsyncOpenAI(
            base_url=base_url,
            api_key="not-needed",
            http_client=httpx2.AsyncClient(transport=transport),
        ) as client:
            report("openai.AsyncOpenAI", await aconverse(client), transport.manager.savings)

    asyncio.run(run())


if __name__ == "__main__":
    main()
