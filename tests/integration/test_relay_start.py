"""`toolref relay` at start checks its gateway (issue 31): the console script as a process,
the real service's gateway (on the test engine) or a fake provider in its place, real
sockets.

Before the fix the relay printed only `gateway ... answers (404)` and started: pointed at a
provider, Claude Code later said "Please install backports.zstd"; a wrong key or a missing
upstream showed only once the agent ran.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import toolref
from tests.support.processes import clean_env
from tests.support.servers import serve

from .relay_gateway import KEY, Scripted, gateway

TOOLREF = str(Path(sys.executable).with_name("toolref"))
NOT_FOUND = {"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def anthropic_like() -> Starlette:
    """A provider where the gateway should be: Anthropic's 404 for any path it lacks."""

    async def not_found(request: Request) -> JSONResponse:
        return JSONResponse(NOT_FOUND, status_code=404)

    return Starlette(routes=[Route("/{path:path}", not_found, methods=["GET", "POST"])])


async def run_to_exit(*args: str, key: str = KEY, **env: str) -> tuple[int, str]:
    """`toolref relay ARGS` until it exits (30 s at most): its exit code and output
    (`key`: TOOLREF_KEY, "" for none; `env`: more variables)."""
    process = await asyncio.create_subprocess_exec(
        TOOLREF,
        "relay",
        *args,
        env=clean_env(**({"TOOLREF_KEY": key} if key else {}), **env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, out.decode()


@asynccontextmanager
async def running(*args: str, key: str = KEY) -> AsyncIterator[tuple[str, list[str]]]:
    """`toolref relay ARGS` on a free port, once it has said all it says at start: its URL,
    and (after the block) its output in the list."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        TOOLREF,
        "relay",
        *args,
        "--port",
        str(port),
        env=clean_env(TOOLREF_KEY=key),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    output: list[str] = []
    said: list[bytes] = []
    assert process.stdout is not None
    try:
        # The port is bound before the gateway is checked: ready once all is said (the
        # token's line comes last, after "listening" and the agents' set-up).
        while not said or b"this start's token" not in said[-1]:
            line = await asyncio.wait_for(process.stdout.readline(), 30)
            assert line, b"".join(said)  # exited before listening
            said.append(line)
        yield f"http://127.0.0.1:{port}", output
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
        output.append((b"".join(said) + out).decode())


async def test_a_toolref_gateway_is_named_with_its_upstreams_and_each_agents_set_up(
    redis: Redis,
) -> None:
    providers: dict[str, Any] = {"anthropic": Scripted().app(), "openai": Scripted().app()}
    async with (
        gateway(redis, providers) as recorded,
        running("--gateway", recorded.url) as (url, output),
    ):
        pass
    [said] = output
    assert (
        f"gateway {recorded.url} is toolref {toolref.__version__}, key accepted; "
        "upstreams: anthropic, openai"
    ) in said
    lines = said.splitlines()
    listening = next(i for i, line in enumerate(lines) if "listening on" in line)
    assert "is toolref" in "\n".join(lines[:listening])  # checked before "listening"
    assert f"ANTHROPIC_BASE_URL={url}/llm/anthropic claude" in said
    assert f'openai_base_url = "{url}/llm/openai/v1"' in said  # Codex
    assert f"OPENAI_BASE_URL={url}/llm/openai/v1 qwen" in said
    assert f"GOOGLE_GEMINI_BASE_URL={url}/llm/NAME gemini" in said  # no Gemini upstream
    assert "it has anthropic, openai" in said
    assert f"OPENAI_API_BASE={url}/llm/openai/v1 aider" in said
    assert KEY not in said


async def test_a_provider_as_gateway_stops_the_start_saying_what_answered() -> None:
    async with serve(anthropic_like()) as provider:
        code, said = await run_to_exit("--gateway", provider, "--port", str(free_port()))
    assert code == 1
    assert f"--gateway {provider} is not a toolref gateway" in said
    assert "answered 404" in said
    assert "Anthropic's API" in said
    assert "Point --gateway at the toolref service" in said
    assert "TOOLREF_UPSTREAMS" in said
    assert "--no-gateway-check" in said
    assert "listening" not in said


async def test_started_anyway_a_turn_says_the_gateway_is_not_one() -> None:
    async with (
        serve(anthropic_like()) as provider,
        running("--gateway", provider, "--no-gateway-check") as (url, output),
        httpx.AsyncClient(timeout=30) as agent,
    ):
        answer = await agent.post(
            f"{url}/llm/anthropic/v1/messages",
            json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert answer.status_code == 400  # not the provider's 404: "model not found" in Claude Code
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "is not a toolref gateway" in error["message"]
    assert "(this request was answered 404)" in error["message"]
    assert "listening" in output[0]


async def test_a_key_the_gateway_refuses_stops_the_start(redis: Redis) -> None:
    async with gateway(redis, {"anthropic": Scripted().app()}) as recorded:
        code, said = await run_to_exit(
            "--gateway", recorded.url, "--port", str(free_port()), key="not-the-tenant-key"
        )
    assert code == 1
    assert f"the gateway {recorded.url} refuses the relay's key" in said
    assert "TOOLREF_KEY" in said
    assert "not the provider's key" in said
    assert "not-the-tenant-key" not in said
    assert "listening" not in said


async def test_a_misspelt_key_variable_is_named(redis: Redis) -> None:
    """The relay's one variable: `TOOLREF_KYE=` was ignored, the relay sent no key."""
    async with gateway(redis, {"anthropic": Scripted().app()}) as recorded:
        args = ("--gateway", recorded.url, "--port", str(free_port()))
        code, said = await run_to_exit(*args, key="", TOOLREF_KYE=KEY)
    assert code == 1  # the gateway wants a key
    assert "TOOLREF_KYE is set; did you mean TOOLREF_KEY?" in said
    assert "refuses a request without a key" in said
    assert KEY not in said


async def test_a_switch_upstream_the_gateway_lacks_stops_the_start(redis: Redis) -> None:
    async with gateway(redis, {"anthropic": Scripted().app()}) as recorded:
        args = ("--gateway", recorded.url, "--port", str(free_port()), "--switch", "anthropic,kimi")
        code, said = await run_to_exit(*args)
    assert code == 1
    assert "--switch names kimi, which the gateway" in said
    assert "(it has anthropic)" in said


async def test_a_gateway_with_no_upstreams_stops_the_start(redis: Redis) -> None:
    async with gateway(redis, {}) as recorded:
        code, said = await run_to_exit("--gateway", recorded.url, "--port", str(free_port()))
    assert code == 1
    assert "has no upstreams" in said
    assert "set TOOLREF_UPSTREAMS where it runs" in said


async def test_a_busy_port_fails_at_once_before_anything_else() -> None:
    """Passes before the fix too (the port was already bound first): kept so that the
    check added before "listening" never comes before the bind."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        gateway_url = f"http://127.0.0.1:{free_port()}"  # nothing there: never asked
        code, said = await run_to_exit("--gateway", gateway_url, "--port", str(port))
    assert code == 1
    [line] = said.strip().splitlines()  # one message, nothing else
    assert line.startswith(f"toolref relay: cannot listen on 127.0.0.1:{port} (Address already")
    assert "another --port" in line  # review (starting it wrong): the fix, said


async def test_a_gateway_port_with_nothing_there_stops_the_start_at_once() -> None:
    """Found trying the product: a mistyped `--gateway` port printed one line, then the
    listening line and every agent's set-up, and the relay ran, answering each turn 502."""
    gateway_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, said = await run_to_exit("--gateway", gateway_url, "--port", str(free_port()))
    assert code == 1
    [line] = said.strip().splitlines()  # one message, nothing else
    assert line.startswith(f"toolref relay: the gateway {gateway_url} does not answer: ")
    assert "connection refused" in line  # what happened
    assert "Check the URL and its port" in line  # the fix
    assert "http://127.0.0.1:8750" in line  # where the service listens by default
    assert "--no-gateway-check" in line


async def test_the_control_token_is_written_never_printed(redis: Redis, tmp_path: Path) -> None:
    """Found trying the product: the relay printed its control token, which supervisors and
    `nohup` keep. stdout and stderr read apart, the whole run (start, a turn, exit)."""
    token_file = tmp_path / "relay.token"
    async with gateway(redis, {"anthropic": Scripted().app()}) as recorded:
        port = free_port()
        process = await asyncio.create_subprocess_exec(
            *(TOOLREF, "relay", "--gateway", recorded.url, "--port", str(port)),
            *("--token-file", str(token_file)),
            env=clean_env(TOOLREF_KEY=KEY),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        assert process.stderr is not None
        said: list[bytes] = []
        while not said or b"this start's token" not in said[-1]:
            line = await asyncio.wait_for(process.stderr.readline(), 30)
            assert line, b"".join(said)  # exited before listening
            said.append(line)
        token = token_file.read_text().strip()
        async with httpx.AsyncClient(timeout=30) as agent:
            answer = await agent.post(
                f"http://127.0.0.1:{port}/llm/anthropic/v1/messages",
                json={
                    "model": "m",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
            assert answer.status_code == 200
            metrics = await agent.get(
                f"http://127.0.0.1:{port}/metrics", headers={"authorization": f"Bearer {token}"}
            )
            assert metrics.status_code == 200  # the file's token is the one the relay wants
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(process.communicate(), 30)
    stdout, stderr = out.decode(), (b"".join(said) + err).decode()
    assert len(token) >= 43
    assert token not in stdout
    assert token not in stderr
    assert f'curl -H "Authorization: Bearer $(cat {token_file})"' in stderr  # how to use it
    assert "turn 1" in stderr  # the run was told, on stderr


async def test_a_token_file_that_cannot_be_written_stops_the_start(
    redis: Redis, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    token_file = tmp_path / "a-file" / "relay.token"
    async with gateway(redis, {"anthropic": Scripted().app()}) as recorded:
        args = ("--gateway", recorded.url, "--port", str(free_port()))
        code, said = await run_to_exit(*args, "--token-file", str(token_file))
    assert code == 1
    assert f"cannot write this start's control token to {token_file}" in said
    assert "give --token-file a file in a folder you can write" in said
    assert "listening" not in said
    assert "Bearer" not in said  # the token is not shown instead


async def test_a_gateway_without_keys_is_said_to_run_without_them(redis: Redis) -> None:
    """Found trying the product: against `make serve` (no TOOLREF_API_KEYS) and no key,
    the relay said "key accepted"."""
    async with gateway(redis, {"anthropic": Scripted().app()}, keys=False) as recorded:
        async with running("--gateway", recorded.url, key="") as (_, keyless):
            pass
        async with running("--gateway", recorded.url, key="any-key") as (_, keyed):
            pass
    [without], [with_one] = keyless, keyed
    assert "key accepted" not in without + with_one
    assert (
        f"gateway {recorded.url} is toolref {toolref.__version__}, without API keys "
        "(one local tenant: no key needed); upstreams: anthropic"
    ) in without
    assert "without API keys (one local tenant: it takes any key, the relay's too)" in with_one
