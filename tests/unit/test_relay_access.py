"""Who may use the relay, as pure parts: the clients a credential makes, the Host values
served, the control token and its file (issue 28)."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolref.sending.editor import Editor
from toolref_relay import Relay, RelayConfig
from toolref_relay.clients import Client, Clients, credential_digest
from toolref_relay.control import bearer, remove, same, switch_header, switch_request, write
from toolref_relay.guard import host_refusal, origin_refusal, path_refusal, served_hosts

SECRET = b"k" * 32


def test_a_client_is_its_provider_credential_whatever_the_order_or_case() -> None:
    one = credential_digest([("X-Api-Key", "sk-1"), ("Accept", "*/*")], "", SECRET)
    assert one == credential_digest([("accept", "json"), ("x-api-key", "sk-1")], "", SECRET)
    assert one != credential_digest([("x-api-key", "sk-2")], "", SECRET)
    assert one != credential_digest([("x-api-key", "sk-1")], "", b"another start")
    both = [("authorization", "Bearer a"), ("x-api-key", "b")]
    assert credential_digest(both, "", SECRET) == credential_digest(both[::-1], "", SECRET)
    assert credential_digest(both, "", SECRET) != credential_digest(both[:1], "", SECRET)
    gemini = credential_digest([], "alt=sse&key=AIza1", SECRET)
    assert gemini == credential_digest([], "key=AIza1&alt=json", SECRET)
    assert gemini != credential_digest([], "key=AIza2", SECRET)
    assert gemini != credential_digest([("x-goog-api-key", "AIza1")], "", SECRET)
    none = credential_digest([("accept", "*/*")], "alt=sse", SECRET)
    assert none == credential_digest([], "", SECRET)  # no credential: one client
    # A value split differently across headers is another credential (lengths are hashed).
    assert credential_digest([("api-key", "ab")], "", SECRET) != credential_digest(
        [("api-key", "a"), ("api-key", "b")], "", SECRET
    )


def test_clients_are_kept_by_upstream_and_credential_least_recent_dropped() -> None:
    made: list[Client] = []

    def make() -> Client:
        made.append(Client(Editor()))
        return made[-1]

    clients = Clients(make, 2)
    victim = [("x-api-key", "sk-victim-never-stored")]
    first = clients.client("a", victim, "")
    assert clients.client("a", victim, "") is first
    assert clients.client("b", victim, "") is not first  # another upstream: another client
    assert clients.client("a", victim, "") is first  # used: now the most recent
    other = clients.client("a", [("x-api-key", "sk-other")], "")  # drops upstream b's
    assert len(clients) == 2
    assert len(made) == 3
    assert clients.client("a", victim, "") is first
    assert clients.client("a", [("x-api-key", "sk-other")], "") is other
    assert clients.client("b", victim, "") is not made[1]  # dropped: made again
    assert "sk-victim" not in repr(vars(clients))
    with pytest.raises(ValueError, match="--max-clients is 0"):
        Clients(make, 0)


def test_the_hosts_a_relay_serves() -> None:
    assert served_hosts(("127.0.0.1", 8760)) == frozenset(
        {"127.0.0.1:8760", "localhost:8760", "[::1]:8760"}
    )
    assert served_hosts(("::1", 8760)) == served_hosts(("127.0.0.1", 8760))
    assert "192.168.1.5:8760" in (served_hosts(("192.168.1.5", 8760)) or ())
    assert "[fe80::1]:8760" in (served_hosts(("fe80::1", 8760)) or ())
    assert "localhost" in (served_hosts(("127.0.0.1", 80)) or ())
    assert served_hosts(None) is None
    assert served_hosts(("/run/relay.sock", None)) is None
    assert host_refusal("LocalHost:8760", ("127.0.0.1", 8760)) is None
    assert host_refusal("anything", None) is None  # a Unix socket: no page reaches it
    for refused in ("evil.example:8760", "localhost:8761", "localhost", None, "x" * 500):
        message = host_refusal(refused, ("127.0.0.1", 8760))
        assert message is not None
        assert "127.0.0.1:8760" in message
        assert "DNS rebinding" in message
        assert len(message) < 500
    assert origin_refusal(None) is None
    assert "evil.example" in (origin_refusal("https://evil.example") or "")


def test_the_token_travels_as_a_bearer_or_a_switch_parameter() -> None:
    token = "t" * 43
    assert bearer([("Authorization", f"Bearer {token}")]) == token
    assert bearer([("authorization", f"bearer  {token} ")]) == token
    assert bearer([("authorization", f"Basic {token}")]) is None
    assert bearer([]) is None
    assert same(token, token)
    assert not same(None, token)
    assert not same(token[:-1], token)
    assert not same("é" * 43, token)
    assert switch_request(f' kimi ; token="{token}"') == ("kimi", token)
    assert switch_request("kimi") == ("kimi", None)
    assert switch_header(f"kimi; token={token}", token, None) == ("kimi", None)
    name, refused = switch_header("kimi", token, "/home/u/.toolref/relay-8760.token")
    assert name == "kimi"
    assert refused is not None
    assert "/home/u/.toolref/relay-8760.token" in refused
    assert token not in refused


def test_the_token_file_is_the_user_s_alone(tmp_path: Path) -> None:
    """Written 0600 in a 0700 folder; a file already there (0644) or a link there is
    replaced, never written through; removed only while it holds this start's token."""
    path = tmp_path / "state" / "relay-8760.token"
    write(path, "first-token")
    assert path.read_text() == "first-token\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    write(path, "second-token")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    path.unlink()
    path.symlink_to(target)
    write(path, "third-token")
    assert target.read_text() == "keep me"
    assert not path.is_symlink()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left
    remove(path, "second-token")  # another start's: left alone
    assert path.exists()
    remove(path, "third-token")
    assert not path.exists()
    remove(path, "third-token")  # already gone: quietly


def test_relay_options_for_clients_and_the_token() -> None:
    config = RelayConfig("http://g", token="s" * 20)
    assert "s" * 20 not in repr(config)
    assert RelayConfig("http://g").token != RelayConfig("http://g").token
    assert len(RelayConfig("http://g").token) >= 43
    with pytest.raises(ValueError, match="control token has 5 characters"):
        RelayConfig("http://g", token="short")
    with pytest.raises(ValueError, match="--max-clients is 0"):
        RelayConfig("http://g", max_clients=0)


@pytest.mark.parametrize(
    "raw_path",
    [
        b"/llm/openai/../../v1/invocations:resolve",  # the registry API, with the tenant's key
        b"/llm/openai/v1/../../../v1/capabilities",
        b"/llm/openai/v1/./models",  # would reach the gateway as /v1/models: altered
        b"/llm/anthropic/..",
    ],
)
def test_a_path_with_a_dot_segment_is_refused_and_nothing_is_forwarded(raw_path: bytes) -> None:
    """Review: httpx resolves dot segments, so `/llm/openai/../../v1/invocations:resolve`
    (which curl --path-as-is or any socket sends as it is) reached the gateway as
    `/v1/invocations:resolve` with the relay's Toolref-Key, past the gateway's own refusal
    of dot segments: any local process could call the registry API as the tenant."""
    forwarded: list[httpx.Request] = []

    def gateway(request: httpx.Request) -> httpx.Response:
        forwarded.append(request)
        return httpx.Response(200, json={})

    relay = Relay(
        RelayConfig("http://gateway.test", key="tenant-key", channel=False),
        transport=httpx.MockTransport(gateway),
        report=lambda _: None,
    )
    sent: list[MutableMapping[str, Any]] = []

    arrived = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> MutableMapping[str, Any]:
        if not arrived:
            await asyncio.Event().wait()  # the agent waits for its answer
        return arrived.pop()

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": raw_path.decode(),
        "raw_path": raw_path,
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8760"), (b"x-api-key", b"sk-agent")],
        "server": ("127.0.0.1", 8760),
    }
    asyncio.run(relay(scope, receive, send))
    assert forwarded == []
    assert sent[0]["status"] == 400
    error = json.loads(sent[1]["body"])["error"]
    assert "dot segment" in error["message"]
    assert error["code"] == "toolref_bad_path"


def test_plain_paths_and_encoded_dots_go_on_as_sent() -> None:
    """Encoded dots are not resolved on the way (the gateway refuses them itself)."""
    assert path_refusal("/llm/openai/v1/models") is None
    assert path_refusal("/llm/openai/v1/files/a..b/.hidden") is None
    assert path_refusal("/llm/openai/%2e%2e/v1") is None
    assert path_refusal("/llm/openai/v1/..") is not None


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("trk_secret\n", "'\\n' at index 10"),  # read from a file, its newline kept
        ("Bearer trk_secret", "' ' at index 6"),
        ("trk_s\u00e9cret", "'\u00e9' at index 5"),  # pasted through a word processor
        ("trk_\u201csecret", "'\u201c' at index 4"),
    ],
)
def test_a_key_that_cannot_travel_in_a_header_is_refused_at_start_unshown(
    key: str, says: str
) -> None:
    """Review: a key with whitespace ended the start in a traceback from the registry
    client, and one with a character outside ASCII in a UnicodeEncodeError traceback from
    httpx; with --no-gateway-check every turn would have failed instead."""
    with pytest.raises(ValueError, match="the key") as refused:
        RelayConfig("http://g", key=key)
    message = str(refused.value)
    assert says in message
    assert "TOOLREF_KEY" in message  # where it came from, and the fix
    assert "secret" not in message
    assert RelayConfig("http://g", key="trk_Ab-9_x.~+/=").key == "trk_Ab-9_x.~+/="


@pytest.mark.parametrize("name", ["..", ".", "a b", "kimi?x=1", "kimi#x", "k%2f", "x" * 65, "é"])
def test_a_switch_name_no_gateway_upstream_can_have_is_refused(name: str) -> None:
    """Review: `--switch ..,anthropic` was taken; with --no-gateway-check each turn went to
    `{gateway}/llm/../v1/...`, which the relay's HTTP client resolves to the gateway's
    registry API (`/v1/...`), with the tenant's key. The gateway's names are 1-64 of
    A-Z a-z 0-9 _ . - (TOOLREF_UPSTREAMS)."""
    with pytest.raises(ValueError, match="--switch names") as refused:
        RelayConfig("http://g", switch=(name, "anthropic"))
    assert "A-Z a-z 0-9 _ . -" in str(refused.value)
    assert RelayConfig("http://g", switch=("kimi-k2.5", "gpt_4")).switch == ("kimi-k2.5", "gpt_4")


def test_a_switch_body_nested_past_the_parser_is_a_400() -> None:
    """Review: `POST /toolref/switch` with `[[[...` 4000 deep (within its 4 KiB) raised
    RecursionError out of the app: a 500 and a traceback in the relay's log."""
    token = "t" * 43
    relay = Relay(
        RelayConfig("http://127.0.0.1:9", switch=("a", "b"), token=token), report=lambda _: None
    )

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=relay)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8760") as c:
            return await c.post(
                "/toolref/switch",
                content=b"[" * 4000,
                headers={"authorization": f"Bearer {token}"},
            )

    answer = asyncio.run(run())
    assert answer.status_code == 400
    assert '{"upstream": NAME}' in answer.json()["error"]
    assert relay.switchboard.selected == "a"
