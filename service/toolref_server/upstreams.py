"""The gateway's upstreams (`TOOLREF_UPSTREAMS`) and the LLM endpoints it hydrates.

`/llm/{name}/{path}` forwards to `{base_url}/{path}`, the query kept. Pure: parsing and
matching only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from toolref.errors import ConfigurationError
from toolref.models import FormatName

NAME_RE: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
PREFIX: Final = "/llm/"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An LLM endpoint the gateway hydrates: its message format and messages key."""

    format: FormatName
    messages_key: str


# path suffix -> endpoint; a suffix, so an upstream whose base URL has its own prefix
# (`https://host/api` with `/v1/...` after it) is matched as well.
ENDPOINTS: Final[tuple[tuple[str, Endpoint], ...]] = (
    ("/messages/count_tokens", Endpoint("anthropic", "messages")),
    ("/messages", Endpoint("anthropic", "messages")),
    ("/chat/completions", Endpoint("openai-chat", "messages")),
    ("/responses", Endpoint("openai-responses", "input")),
)


def endpoint(method: str, path: str) -> Endpoint | None:
    """The LLM endpoint a request calls; None for anything to pass through as it is."""
    if method != "POST":
        return None
    trimmed = path.rstrip("/")
    for suffix, found in ENDPOINTS:
        if trimmed.endswith(suffix):
            return found
    return None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a gateway request goes: the upstream's name, its base URL, the path after it."""

    name: str
    base_url: str
    path: str  # starts with "/"

    def url(self, query: bytes) -> str:
        tail = "?" + query.decode("latin-1") if query else ""
        return self.base_url + self.path + tail


def parse_upstreams(text: str) -> dict[str, str]:
    """`name=base_url,...` into {name: base_url without a trailing slash}, saying exactly
    what is wrong."""
    found: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = (part.strip() for part in entry.partition("="))
        parts = urlsplit(url)
        if not sep or not NAME_RE.fullmatch(name):
            raise ConfigurationError(
                f"TOOLREF_UPSTREAMS entry {entry!r} is not `name=base_url`: the name is 1-64 "
                "of A-Z a-z 0-9 _ . - (it becomes the path /llm/{name}/...)"
            )
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise ConfigurationError(
                f"TOOLREF_UPSTREAMS gives {name!r} the base URL {url!r}; use an http(s) URL "
                "with a host and no query, such as https://api.anthropic.com"
            )
        if name in found:
            raise ConfigurationError(
                f"TOOLREF_UPSTREAMS names {name!r} twice; give each upstream one name"
            )
        found[name] = url.rstrip("/")
    return found


def route(upstreams: dict[str, str], path: str) -> Route | None:
    """The route of a `/llm/{name}/{path}` request path; None when it names no upstream."""
    if not path.startswith(PREFIX):
        return None
    name, _, rest = path[len(PREFIX) :].partition("/")
    base = upstreams.get(name)
    if base is None:
        return None
    return Route(name, base, "/" + rest)
