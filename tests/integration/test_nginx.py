"""toolref behind a real nginx: the relay (`toolref relay`, a process) -> nginx (a
foreground process of the test's own, `nginx -p TMP -c CONF -g 'daemon off;'`) -> the
service (`toolref-server serve` on its embedded engine, a process) -> a provider served
here (the only fake: what is outside the machine).

nginx runs either the server block docs/operations.md documents ("Behind nginx"), read from
that page so the docs cannot drift (its `listen` and `proxy_pass` port replaced by the
test's; every other line as written: `proxy_http_version 1.1`, the `Upgrade`/`Connection`
lines and their `map`, `Host`, `X-Forwarded-For`, `X-Forwarded-Proto`,
`client_max_body_size`, the timeouts), or nginx's plain `proxy_pass` alone (its defaults:
HTTP/1.0 to the gateway, no upgrades, answers buffered, bodies up to 1 MiB).

nginx is $NGINX or /usr/sbin/nginx (`make test` installs Debian's); without it the tests
skip, saying why, and fail under CI=true.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import re
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import need
from tests.integration.relay_gateway import KEY, Scripted
from tests.integration.test_answer_dictionary import Provider, replies
from tests.integration.test_channel import converse
from tests.integration.test_relay_start import run_to_exit, running
from tests.support.chain import free_port, wait_listening
from tests.support.processes import ROOT, Service
from tests.support.servers import serve
from tests.unit.edits.agents import HEADERS
from toolref.edits.wire import MEDIA_TYPE

pytestmark = pytest.mark.engine

DOCS = ROOT / "docs" / "operations.md"
GUARD = 20  # seconds: a hang's guard, never a measure
# What nginx logs of each request: enough to tell a turn sent whole from an edit.
LOG_FORMAT = '"$request_method $uri $status $content_type $request_length"'


def nginx_binary() -> str:
    found = os.environ.get("NGINX") or "/usr/sbin/nginx"
    if not (shutil.which(found) or Path(found).is_file()):
        need(f"no nginx at {found}: apt-get install -y nginx (`make nginx`), or NGINX=/path")
    return found


def documented_block() -> str:
    """The nginx configuration docs/operations.md documents: its one ```nginx block."""
    [block] = re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), re.DOTALL)
    return str(block)


def documented(port: int, gateway: int) -> str:
    """The documented block on the test's ports: `listen 80;` and the gateway's
    `127.0.0.1:8750` are the only lines changed."""
    block = documented_block()
    assert block.count("listen 80;") == 1
    assert block.count("http://127.0.0.1:8750;") == 1
    block = block.replace("listen 80;", f"listen 127.0.0.1:{port};")
    return block.replace("http://127.0.0.1:8750;", f"http://127.0.0.1:{gateway};")


def plain(port: int, gateway: int) -> str:
    """nginx's defaults: `proxy_pass` and nothing else."""
    return (
        f"server {{ listen 127.0.0.1:{port}; "
        f"location / {{ proxy_pass http://127.0.0.1:{gateway}; }} }}\n"
    )


@dataclass
class Nginx:
    url: str
    folder: Path

    def log(self) -> list[list[str]]:
        """The access log: per request, method, path, status, content type, length."""
        lines = (self.folder / "access.log").read_text().splitlines()
        return [line.strip('"').split(" ") for line in lines]

    def posts(self) -> list[list[str]]:
        return [entry for entry in self.log() if entry[0] == "POST"]


def configured(folder: Path, server: str) -> Path:
    """nginx.conf in `folder`: `server` in an http block of nginx's defaults, every file
    nginx writes (pid, logs, bodies and answers it buffers) under `folder`."""
    folder.mkdir()
    conf = folder / "nginx.conf"
    temp = " ".join(
        f"{kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi")
    )
    # As root, nginx would run its worker as `nobody`, who cannot write under pytest's
    # folders (a body over client_body_buffer_size goes to a file there): as root then.
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf.write_text(
        f"{user}worker_processes 1;\nerror_log {folder}/error.log info;\n"
        f"pid {folder}/nginx.pid;\nevents {{ worker_connections 256; }}\n"
        f"http {{\n{temp}\nuwsgi_temp_path {folder}/uwsgi; scgi_temp_path {folder}/scgi;\n"
        f"log_format turns {LOG_FORMAT};\naccess_log {folder}/access.log turns;\n"
        f"{server}}}\n"
    )
    return conf


@asynccontextmanager
async def nginx(folder: Path, server: str, port: int) -> AsyncIterator[Nginx]:
    """nginx in the foreground (`daemon off`), a child of the test, not the system's."""
    conf = configured(folder, server)
    process = await asyncio.create_subprocess_exec(
        nginx_binary(),
        *("-p", str(folder), "-c", str(conf), "-g", "daemon off;"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,  # what it says before its error_log is open
        stdin=asyncio.subprocess.DEVNULL,
    )
    try:
        try:
            await wait_listening(port, process, GUARD)
        except RuntimeError as exc:
            assert process.stderr is not None
            said = await asyncio.wait_for(process.stderr.read(), GUARD)
            raise AssertionError(said.decode(errors="replace")) from exc
        yield Nginx(f"http://127.0.0.1:{port}", folder)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)  # nginx's fast shutdown
            await asyncio.wait_for(process.wait(), GUARD)


@dataclass
class Stack:
    nginx: Nginx
    service: Service


@asynccontextmanager
async def behind_nginx(tmp_path: Path, provider_url: str, *, docs: bool) -> AsyncIterator[Stack]:
    """The service (upstream `anthropic` = the provider, one tenant whose key is `KEY`)
    behind nginx: the documented block (`docs`), or nginx's plain `proxy_pass`."""
    tenant = f"t={hashlib.sha256(KEY.encode()).hexdigest()}"
    gateway = free_port()
    service = await asyncio.to_thread(
        Service,
        tmp_path / "data",
        gateway,
        TOOLREF_UPSTREAMS=f"anthropic={provider_url}",
        TOOLREF_API_KEYS=tenant,
    )
    try:
        port = free_port()
        server = (documented if docs else plain)(port, gateway)
        async with nginx(tmp_path / "nginx", server, port) as proxy:
            yield Stack(proxy, service)
    finally:
        await asyncio.to_thread(service.stop)


async def edits_applied(service: Service) -> int:
    """`toolref_edits_total{outcome="applied"}`, read from the service itself (loopback, no
    proxy header: /metrics answers without a key)."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(service.url + "/metrics")).text
    found = re.findall(r'^toolref_edits_total\{outcome="applied"\} (\S+)$', text, re.MULTILINE)
    return int(float(found[0])) if found else 0


async def test_a_conversation_through_the_documented_config_arrives_exactly_as_edits(
    tmp_path: Path,
) -> None:
    """(a) Over HTTP (`--no-channel`: every turn a request nginx logs): every turn in the
    edit's wire form, the first whole (no base), every later one an edit of the turn
    before, a fraction of its body, each reaching the provider byte for byte."""
    provider = Provider(replies(6, 11))
    async with (
        serve(provider.app()) as provider_url,
        behind_nginx(tmp_path, provider_url, docs=True) as stack,
        running("--gateway", stack.nginx.url, "--no-channel") as (relay_url, _),
    ):
        bodies = await converse(relay_url, provider, 6)
        applied = await edits_applied(stack.service)
    assert provider.seen == bodies
    posts = stack.nginx.posts()
    assert [entry[1:3] for entry in posts] == [["/llm/anthropic/v1/messages", "200"]] * 6
    assert [entry[3] for entry in posts] == [MEDIA_TYPE] * 6
    for entry, body in zip(posts[1:], bodies[1:], strict=True):
        assert int(entry[4]) < len(body) / 2  # head and all: an edit, not the body
    assert applied == 6  # the first too: an edit of nothing


@pytest.mark.parametrize("docs", [True, False], ids=["documented", "plain"])
async def test_a_streamed_answer_stays_streamed_through_nginx(tmp_path: Path, docs: bool) -> None:
    """(b) The provider holds its stream open after its first event until the agent has
    seen that event: a buffering nginx (its default, the plain config) would hold that
    event back with the rest, and the turn would never end. The gateway's
    `X-Accel-Buffering: no` lets it through either way; nginx consumes the header."""
    gate = asyncio.Event()
    scripted = Scripted(gate=gate)
    body = {"model": "scripted-1", "max_tokens": 9, "stream": True, "messages": [
        {"role": "user", "content": "stream it " * 40}
    ]}  # fmt: skip
    async with (
        serve(scripted.app()) as provider_url,
        behind_nginx(tmp_path, provider_url, docs=docs) as stack,
        running("--gateway", stack.nginx.url, "--no-channel") as (relay_url, _),
        httpx.AsyncClient(timeout=GUARD) as agent,
    ):
        url = relay_url + "/llm/anthropic/v1/messages"
        async with agent.stream("POST", url, json=body, headers=HEADERS) as answer:
            assert answer.status_code == 200
            assert "x-accel-buffering" not in answer.headers
            chunks = answer.aiter_raw()
            first = await asyncio.wait_for(anext(chunks), GUARD)
            assert first.startswith(b"event: message_start")
            assert not scripted.ended.is_set()  # the provider has not sent the rest
            gate.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert b"event: message_stop" in rest
    assert scripted.ended.is_set()
    assert [entry[:3] for entry in stack.nginx.posts()] == [
        ["POST", "/llm/anthropic/v1/messages", "200"]
    ]


@pytest.mark.parametrize("docs", [True, False], ids=["documented", "plain"])
async def test_the_channel_through_nginx_or_every_turn_over_http_without_upgrades(
    tmp_path: Path, docs: bool
) -> None:
    """(c) The relay's channel (a WebSocket at `/v1/channel`, as `Toolref-Channel` names
    it): with the documented `Upgrade`/`Connection` lines every turn rides it, no turn a
    request of its own; nginx's plain config passes no upgrade, and the relay sends every
    turn over HTTP instead, each still exact."""
    provider = Provider(replies(5, 12))
    async with (
        serve(provider.app()) as provider_url,
        behind_nginx(tmp_path, provider_url, docs=docs) as stack,
    ):
        async with running("--gateway", stack.nginx.url) as (relay_url, output):
            bodies = await converse(relay_url, provider, 5)
            applied = await edits_applied(stack.service)
        log = stack.nginx.log()  # the channel's line is written once the relay closed it
    assert provider.seen == bodies
    assert applied == 5
    [said] = output
    channel = [entry for entry in log if entry[1] == "/v1/channel"]
    if docs:
        assert [entry[:3] for entry in channel] == [["GET", "/v1/channel", "101"]]
        assert stack.nginx.posts() == []
        assert "no channel to" not in said
    else:
        assert len(channel) == 1
        assert channel[0][2] != "101"
        assert len(stack.nginx.posts()) == 5
        assert "no channel to" in said
        assert "over HTTP" in said


async def test_a_first_turn_over_one_mib_needs_the_documented_body_limit(
    tmp_path: Path,
) -> None:
    """(d) A conversation the relay has not seen is sent whole. Past nginx's default
    `client_max_body_size` (1 MiB) nginx refuses it with its own HTML 413 page: the agent
    gets a 413 in the provider's error shape that names nginx's limit. The documented
    limit passes it, byte for byte."""
    # Tool output that does not compress much (the relay compresses what it sends).
    output = base64.b64encode(random.Random(14).randbytes(1_800_000)).decode()
    big = json.dumps({"model": "scripted-1", "max_tokens": 9, "stream": True, "messages": [
        {"role": "user", "content": "a long session, resumed: " + output}
    ]}).encode()  # fmt: skip
    for docs in (False, True):
        provider = Provider(replies(1, 13))
        async with (
            serve(provider.app()) as provider_url,
            behind_nginx(tmp_path / str(docs), provider_url, docs=docs) as stack,
            running("--gateway", stack.nginx.url, "--no-channel") as (relay_url, _),
            httpx.AsyncClient(timeout=GUARD) as agent,
        ):
            url = relay_url + "/llm/anthropic/v1/messages"
            answer = await agent.post(url, content=big, headers=HEADERS)
        if docs:
            assert answer.status_code == 200, answer.text
            assert provider.seen == [big]
            continue
        [turn] = stack.nginx.posts()
        assert turn[2] == "413"  # nginx refused it
        assert answer.status_code == 413
        error = answer.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "request_too_large"
        assert "nginx" in error["error"]["message"]
        assert "client_max_body_size" in error["error"]["message"]
        assert provider.seen == []


async def test_a_gateway_down_behind_nginx_is_told_in_the_providers_shape(
    tmp_path: Path,
) -> None:
    """nginx answers 502 with its HTML page when the gateway behind it is down: a turn gets
    that as a 502 in the provider's error shape naming nginx and the fix (not nginx's HTML),
    and a relay started then refuses to start, saying the proxy's gateway does not answer
    (not that nginx is some other server)."""
    provider = Provider(replies(2, 15))
    async with (
        serve(provider.app()) as provider_url,
        behind_nginx(tmp_path, provider_url, docs=True) as stack,
    ):
        async with (
            running("--gateway", stack.nginx.url, "--no-channel") as (relay_url, _),
            httpx.AsyncClient(timeout=GUARD) as agent,
        ):
            await converse(relay_url, provider, 1)
            await asyncio.to_thread(stack.service.stop)
            url = relay_url + "/llm/anthropic/v1/messages"
            body = {"model": "scripted-1", "max_tokens": 9, "messages": [
                {"role": "user", "content": "and now?"}
            ]}  # fmt: skip
            answer = await agent.post(url, json=body, headers=HEADERS)
        code, said = await run_to_exit("--gateway", stack.nginx.url, "--port", str(free_port()))
    assert answer.status_code == 502
    error = answer.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    message = error["error"]["message"]
    assert message.startswith("nginx")
    assert "502" in message
    assert "start toolref-server" in message
    assert stack.nginx.posts()[-1][2] == "502"
    assert code != 0
    assert f"--gateway {stack.nginx.url} is a proxy (nginx" in said
    assert "does not answer" in said
