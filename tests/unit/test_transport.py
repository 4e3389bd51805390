"""`toolref.sending.transport.recognise`: which requests the transports rewrite (pure)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from toolref.sending.answers import may_resend
from toolref.sending.transport import LLMRequest, Transport, recognise

JSON = {"content-type": "application/json"}


def body(**members: Any) -> bytes:
    return json.dumps({"model": "m", **members}).encode()


MESSAGES = [{"role": "user", "content": "hi"}]
# Valid JSON a manager cannot write back, each of which providers accept.
UNCARRIABLE = {
    # What JSON.stringify writes for a string cut inside an emoji.
    "lone-surrogate": b'{"model":"m","messages":[{"role":"user","content":"cut \\ud83d"}]}',
    "past-a-double": b'{"model":"m","messages":[{"role":"user","content":"x"}],"seed":1e400}',
    "past-int-digits": b'{"model":"m","messages":[],"n":' + b"9" * 5000 + b"}",
}


@pytest.mark.parametrize(
    ("path", "fmt", "key"),
    [
        ("/v1/chat/completions", "openai-chat", "messages"),
        ("/openai/v1/chat/completions/", "openai-chat", "messages"),
        ("/v1/responses", "openai-responses", "input"),
        ("/v1/messages", "anthropic", "messages"),  # also ?beta=true: the query is not the path
        # A token count carries the conversation /v1/messages would: the same path, the same
        # table as the gateway's (toolref.wire.endpoints), so its bytes are saved too.
        ("/v1/messages/count_tokens", "anthropic", "messages"),
        # Gemini (issue 30: these passed through at 1.0x), the stream's `?alt=sse` a query.
        ("/v1beta/models/gemini-2.5-pro:generateContent", "gemini", "contents"),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", "gemini", "contents"),
    ],
)
def test_each_api_is_rewritten_with_its_format_and_key(path: str, fmt: str, key: str) -> None:
    content = body(**{key: MESSAGES})
    found = recognise("POST", path, JSON, content)
    assert found == LLMRequest(fmt, key, json.loads(content))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "path", "headers", "content"),
    [
        ("GET", "/v1/chat/completions", JSON, body(messages=MESSAGES)),
        ("POST", "/v1/responses/input_tokens", JSON, body(input=MESSAGES)),
        ("POST", "/v1/embeddings", JSON, body(input=["text"])),
        ("POST", "/v1/responses", JSON, body(input="a string, not items")),
        ("POST", "/v1/threads/t1/messages", JSON, body(role="user", content="hi")),
        ("POST", "/v1/chat/completions", {"content-type": "text/plain"}, body(messages=[])),
        ("POST", "/v1/chat/completions", {**JSON, "content-encoding": "gzip"}, b"\x1f\x8b"),
        ("POST", "/v1/chat/completions", {**JSON, "Toolref-Protocol": "2"}, body(messages=[])),
        ("POST", "/v1/chat/completions", JSON, b"{not json"),
        ("POST", "/v1/chat/completions", JSON, b'{"messages": [], "temperature": NaN}'),
        ("POST", "/v1/chat/completions", JSON, b"[]"),
        ("POST", "/v1/chat/completions", JSON, UNCARRIABLE["lone-surrogate"]),
        ("POST", "/v1/chat/completions", JSON, UNCARRIABLE["past-a-double"]),
        ("POST", "/v1/chat/completions", JSON, UNCARRIABLE["past-int-digits"]),
    ],
    ids=[
        "GET",
        "openai-token-count",
        "other-path",
        "responses-input-string",
        "no-messages-list",
        "not-json",
        "compressed",
        "already-toolref",
        "malformed",
        "non-finite",
        "not-an-object",
        "lone-surrogate",
        "past-a-double",
        "past-int-digits",
    ],
)
def test_everything_else_passes_through(
    method: str, path: str, headers: dict[str, str], content: bytes
) -> None:
    assert recognise(method, path, headers, content) is None


def test_header_names_are_matched_in_any_case() -> None:
    headers = {"Content-Type": "application/json; charset=utf-8", "Content-Encoding": "identity"}
    assert recognise("post", "/v1/chat/completions", headers, body(messages=[])) is not None


@pytest.mark.parametrize(
    ("status", "media", "resend"),
    [
        (409, "application/problem+json", True),
        (400, "application/problem+json", True),
        (422, "application/problem+json", False),
        (409, "application/json", False),
        (200, "text/event-stream", False),
    ],
)
def test_only_problems_the_manager_may_resend_on_are_read_first(
    status: int, media: str, resend: bool
) -> None:
    assert may_resend(httpx.Response(status, headers={"content-type": media})) is resend


def test_paired_surrogate_escapes_are_rewritten() -> None:
    """An emoji written as an escaped pair is ordinary text: the body is still rewritten."""
    content = b'{"model":"m","messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    found = recognise("POST", "/v1/chat/completions", JSON, content)
    assert found is not None
    assert found.body["messages"][0]["content"] == "\U0001f600"


@pytest.mark.parametrize("name", sorted(UNCARRIABLE))
def test_a_body_the_manager_cannot_carry_reaches_the_provider_as_it_came(name: str) -> None:
    """Fails before the fix: the transport raised (UnicodeEncodeError, ValueError) on every
    try, so the conversation could not go on while the value stayed in its history."""
    seen: list[bytes] = []

    def provider(request: httpx.Request) -> httpx.Response:
        seen.append(request.read())
        return httpx.Response(200, json={"id": "r"})

    with httpx.Client(transport=Transport(httpx.MockTransport(provider))) as client:
        answer = client.post(
            "https://llm.test/v1/chat/completions", content=UNCARRIABLE[name], headers=JSON
        )
    assert answer.status_code == 200
    assert seen == [UNCARRIABLE[name]]
