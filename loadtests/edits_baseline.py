"""The baseline of issue 30: what an agent would send the provider itself with delta
compression, each request body compressed with zstd against the body before it in the same
conversation as a raw-content dictionary (RFC 9842's dictionary transport, applied to
requests), under the agent's own request line and headers.

The baseline is a lower bound of that scheme: it counts no dictionary hash (RFC 9842's
`dcz` frames carry 36 bytes of it, and `Available-Dictionary` another header), only the
`content-encoding` line a compressed body needs. Pure: bytes in, sizes out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final

import zstandard

LEVEL: Final = 3  # zstd's default level, what an HTTP client would use
Headers = Sequence[tuple[str, str]]

# What the agents send besides the body: Claude Code (the Anthropic TypeScript SDK) and a
# Python agent on the OpenAI SDK, as they send them (credentials of their real lengths).
CLAUDE_CODE: Final[Headers] = (
    ("accept", "application/json"),
    (
        "anthropic-beta",
        "claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14,"
        "fine-grained-tool-streaming-2025-05-14",
    ),
    ("anthropic-dangerous-direct-browser-access", "true"),
    ("anthropic-version", "2023-06-01"),
    ("authorization", "Bearer sk-ant-oat01-" + "x" * 95),
    ("content-type", "application/json"),
    ("user-agent", "claude-cli/1.0.98 (external, cli)"),
    ("x-app", "cli"),
    ("x-stainless-arch", "x64"),
    ("x-stainless-helper-method", "stream"),
    ("x-stainless-lang", "js"),
    ("x-stainless-os", "Linux"),
    ("x-stainless-package-version", "0.60.0"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-runtime", "node"),
    ("x-stainless-runtime-version", "v22.17.0"),
    ("x-stainless-timeout", "600"),
    ("accept-encoding", "gzip, deflate, br, zstd"),
)
OPENAI_PYTHON: Final[Headers] = (
    ("accept", "application/json"),
    ("accept-encoding", "gzip, deflate"),
    ("authorization", "Bearer sk-proj-" + "x" * 156),
    ("content-type", "application/json"),
    ("user-agent", "OpenAI/Python 1.99.9"),
    ("x-stainless-arch", "x64"),
    ("x-stainless-async", "false"),
    ("x-stainless-lang", "python"),
    ("x-stainless-os", "Linux"),
    ("x-stainless-package-version", "1.99.9"),
    ("x-stainless-raw-response", "true"),
    ("x-stainless-read-timeout", "600"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-runtime", "CPython"),
    ("x-stainless-runtime-version", "3.12.3"),
)
AGENT_HEADERS: Final[dict[str, Headers]] = {
    "anthropic": CLAUDE_CODE,
    "openai-chat": OPENAI_PYTHON,
}
PROVIDER_HOSTS: Final = {"anthropic": "api.anthropic.com", "openai-chat": "api.openai.com"}


def head(target: str, host: str, headers: Headers, length: int, encoding: str | None) -> bytes:
    """A request's line and headers as an HTTP/1.1 client writes them, blank line included."""
    lines = [f"POST {target} HTTP/1.1", f"host: {host}", f"content-length: {length}"]
    if encoding is not None:
        lines.append(f"content-encoding: {encoding}")
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def delta(body: bytes, previous: bytes | None) -> bytes:
    """`body` as one zstd frame against `previous` (a raw-content dictionary), or alone
    when there is none."""
    if not previous:
        return zstandard.ZstdCompressor(level=LEVEL).compress(body)
    dictionary = zstandard.ZstdCompressionDict(previous, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    return zstandard.ZstdCompressor(level=LEVEL, dict_data=dictionary).compress(body)


def baseline(
    target: str, host: str, headers: Headers, turns: Sequence[tuple[int, bytes]]
) -> list[int]:
    """Bytes on the wire of each turn (`(conversation, body)`, in order): its head and its
    body compressed against the previous body of the same conversation."""
    previous: dict[int, bytes] = {}
    sizes = []
    for conversation, body in turns:
        before = previous.get(conversation)
        frame = delta(body, before)
        encoding = "dcz" if before else "zstd"
        sizes.append(len(head(target, host, headers, len(frame), encoding)) + len(frame))
        previous[conversation] = body
    return sizes


def _unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def content_bytes(bodies: Iterable[dict[str, Any]], messages_key: str = "messages") -> int:
    """Raw JSON bytes of what a conversation said: every distinct message it ever sent and
    every distinct rest of its bodies (model, system, tools...), each once, cache marks
    aside (a message whose mark moved is the same message). For a conversation that only
    grows, its last body; for one compacted or rewound, also what it said before."""
    seen: set[str] = set()
    total = 0
    for body in bodies:
        rest = {k: v for k, v in body.items() if k != messages_key}
        for part in [rest, *body.get(messages_key, [])]:
            text = json.dumps(_unmarked(part), ensure_ascii=False, separators=(",", ":"))
            if text not in seen:
                seen.add(text)
                total += len(text.encode())
    return total
