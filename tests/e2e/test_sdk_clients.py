"""The official `openai` and `anthropic` Python SDKs as the agents, against the fake provider:
a session of scripted tool calls each SDK streams, runs for real in a scratch directory and
answers, then the final text. The provider-side half of the agent CLI runs in
tests/e2e/test_agents.py (fast: no npm, no CLI; part of `make test`)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.support.fake_provider import (
    FINAL_TEXT,
    SIDE_TEXT,
    Api,
    FakeProvider,
    Script,
    step_file,
    tool_results,
)
from tests.support.servers import serve

CALLS = 6
TIMEOUT = 20.0
SHELL: dict[str, Any] = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
READ: dict[str, Any] = {
    "type": "object",
    "properties": {"file_path": {"type": "string"}},
    "required": ["file_path"],
}
EXEC: dict[str, Any] = {  # Codex's exec_command, cut down
    "type": "object",
    "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
    "required": ["cmd"],
}
PROMPT = "Run the scripted steps."


@dataclass
class Provider:
    fake: FakeProvider
    script: Script
    base: str  # what the SDK is pointed at


@pytest.fixture
async def provider(tmp_path: Path) -> AsyncIterator[Provider]:
    script = Script(CALLS, tmp_path)
    fake = FakeProvider(script)
    async with serve(fake.app) as url:
        yield Provider(fake, script, url)


def run_tool(name: str, arguments: dict[str, Any], workdir: Path) -> str:
    """What an agent does with a call: a shell command run for real, or a file read."""
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, str):
        done = subprocess.run(
            ["bash", "-c", command],
            check=True,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return done.stdout + done.stderr
    return Path(arguments["file_path"]).read_text()


def check_session(provider: Provider, api: Api, final: str) -> None:
    """The scripted flow ran: the final text came, every step's file is there, and each
    request carried the real results of the calls before it."""
    fake, script = provider.fake, provider.script
    assert FINAL_TEXT in final
    turns = fake.turns(api)
    assert [r.results for r in turns] == list(range(CALLS + 1))
    assert [r.answer.split(":")[0] for r in turns] == ["tool"] * CALLS + ["text"]
    for k in range(CALLS):
        if script.kind(k) == "shell":
            assert step_file(script.workdir, k).read_text().strip() == script.expected(k)
    for record in turns:
        assert record.stream
        assert len(record.wire) == int(record.header("content-length") or -1)
        results = tool_results(api, record.json())
        assert len(results) == record.results
        for k, text in enumerate(results):
            assert script.expected(k) in text, (k, text)
    sizes = [len(r.body) for r in turns]
    assert sizes == sorted(sizes)  # the whole conversation, resent every turn


async def test_anthropic_messages_streaming(provider: Provider) -> None:
    tools: list[Any] = [
        {"name": "Bash", "description": "Run a command", "input_schema": SHELL},
        {"name": "Read", "description": "Read a file", "input_schema": READ},
    ]
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    async with anthropic.AsyncAnthropic(
        base_url=provider.base, api_key="k", max_retries=0, timeout=TIMEOUT
    ) as client:
        for _ in range(CALLS + 1):
            async with client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=1024, messages=messages, tools=tools
            ) as stream:
                message = await stream.get_final_message()
            messages.append({"role": "assistant", "content": message.content})
            uses = [b for b in message.content if b.type == "tool_use"]
            if not uses:
                break
            assert message.stop_reason == "tool_use"
            results: list[Any] = [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": run_tool(use.name, dict(use.input), provider.script.workdir),
                }
                for use in uses
            ]
            messages.append({"role": "user", "content": results})
        counted = await client.messages.count_tokens(
            model="claude-sonnet-4-6", messages=messages, tools=tools
        )
    assert counted.input_tokens > 0
    final = "".join(b.text for b in message.content if b.type == "text")
    check_session(provider, "messages", final)


async def test_openai_chat_streaming(provider: Provider) -> None:
    tools: list[Any] = [
        {"type": "function", "function": {"name": n, "parameters": p}}
        for n, p in (("run_shell_command", SHELL), ("read_file", READ))
    ]
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    async with openai.AsyncOpenAI(
        base_url=provider.base + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT
    ) as client:
        for _ in range(CALLS + 1):
            async with client.chat.completions.stream(
                model="fake-model",
                messages=messages,
                tools=tools,
                stream_options={"include_usage": True},
            ) as stream:
                completion = await stream.get_final_completion()
            assert completion.usage is not None
            message = completion.choices[0].message
            calls = [c for c in message.tool_calls or () if c.type == "function"]
            messages.append(message.model_dump(exclude_none=True, exclude_unset=True))
            if not calls:
                break
            assert completion.choices[0].finish_reason == "tool_calls"
            for call in calls:
                arguments = json.loads(call.function.arguments)
                output = run_tool(call.function.name, arguments, provider.script.workdir)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    check_session(provider, "chat", message.content or "")


async def test_openai_responses_streaming(provider: Provider) -> None:
    tools: list[Any] = [{"type": "function", "name": "exec_command", "parameters": EXEC}]
    items: list[Any] = [{"role": "user", "content": PROMPT}]
    async with openai.AsyncOpenAI(
        base_url=provider.base + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT
    ) as client:
        for _ in range(CALLS + 1):
            async with client.responses.stream(
                model="gpt-5-codex", input=items, tools=tools, store=False
            ) as stream:
                response = await stream.get_final_response()
            assert response.usage is not None
            calls = [o for o in response.output if o.type == "function_call"]
            items += [o.model_dump(exclude_none=True) for o in response.output]
            if not calls:
                break
            for call in calls:
                output = run_tool(call.name, json.loads(call.arguments), provider.script.workdir)
                items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": output}
                )
    check_session(provider, "responses", response.output_text)


async def test_whole_answers_and_side_calls(provider: Provider) -> None:
    """Without `stream` the answers are whole JSON; without tools, plain text."""
    shell: list[Any] = [{"name": "Bash", "input_schema": SHELL}]
    async with anthropic.AsyncAnthropic(
        base_url=provider.base, api_key="k", max_retries=0, timeout=TIMEOUT
    ) as client:
        message = await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}], tools=shell
        )
        assert message.content[0].type == "tool_use"
        assert message.content[0].name == "Bash"
        side = await client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "title?"}]
        )
        assert side.content[0].type == "text"
        assert side.content[0].text == SIDE_TEXT
    async with openai.AsyncOpenAI(
        base_url=provider.base + "/v1", api_key="k", max_retries=0, timeout=TIMEOUT
    ) as oai:
        chat = await oai.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "read_file", "parameters": READ}}],
        )
        # step 0 is a shell step; with no shell tool offered the script says so in text
        assert chat.choices[0].message.content is not None
        assert "no shell tool" in chat.choices[0].message.content
        response = await oai.responses.create(
            model="m",
            input="hi",
            tools=[{"type": "function", "name": "shell", "parameters": {}, "strict": False}],
        )
        assert response.output[0].type == "function_call"
        assert json.loads(response.output[0].arguments)["command"].startswith("echo e2e-out-")
    answers = [r.answer for r in provider.fake.requests]
    assert answers[:2] == ["tool:Bash", "side"]
    assert answers[2].startswith("error: no shell tool among ['read_file']")
    assert answers[3] == "tool:shell"
    assert all(not r.stream for r in provider.fake.requests)
