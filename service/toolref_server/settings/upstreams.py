"""`TOOLREF_UPSTREAMS`: `name=base_url,...` read into `Upstream`s (where each name's requests
go, and the credentials its base URL carries, never shown: a URL in a message or a log line
is masked by `toolref.wire.redaction`). Pure: parsing only."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote, urlsplit

from toolref.wire import redaction
from toolref.wire.endpoints import is_upstream_name
from toolref.wire.errors import ConfigurationError

# A path segment as a request target carries it: visible ASCII, `%` only to escape.
RAW_SEGMENT: Final = re.compile(rb"(?:[\x21-\x24\x26-\x7e]|%[0-9A-Fa-f]{2})*")


@dataclass(frozen=True, slots=True)
class Upstream:
    """One `TOOLREF_UPSTREAMS` entry: where its requests go. Its credentials (a base URL's
    `user:password@`) become `authorization` and are never shown: `shown` is the URL
    without them, for problem details; `logged` the URL as configured, its credentials
    masked, for the start log."""

    name: str
    scheme: str  # "http" or "https"
    host: str  # ASCII (IDNA for a name that is not); an IPv6 address without brackets
    port: int
    base_path: str  # "" or "/api": raw, as configured, without a trailing slash
    authorization: str | None = field(default=None, repr=False)  # `Basic ...`, userinfo's
    configured: str = field(default="", repr=False, compare=False)  # the URL as given

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    @property
    def shown(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.base_path}"

    @property
    def logged(self) -> str:
        return redaction.url(self.configured or self.shown)


def parse_upstreams(text: str) -> dict[str, Upstream]:
    """`name=base_url,...` into {name: Upstream}, saying exactly what is wrong (never
    quoting a URL's credentials)."""
    found: dict[str, Upstream] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = (part.strip() for part in entry.partition("="))
        if not sep or not is_upstream_name(name):
            raise ConfigurationError(
                f"TOOLREF_UPSTREAMS entry {redaction.urls_in(entry)!r} is not `name=base_url`: "
                "the name is 1-64 of A-Z a-z 0-9 _ . -, not . or .. (it becomes the path "
                "/llm/{name}/..., where a dot segment would name another path)"
            )
        if name in found:
            raise ConfigurationError(
                f"TOOLREF_UPSTREAMS names {name!r} twice; give each upstream one name"
            )
        found[name] = _upstream(name, url)
    return found


def _upstream(name: str, url: str) -> Upstream:
    wrong = ConfigurationError(
        f"TOOLREF_UPSTREAMS gives {name!r} the base URL {redaction.url(url)!r}; use an "
        "http(s) URL with a host, a port if any of 1-65535, a path of plain segments and no "
        "query or fragment, such as https://api.anthropic.com"
    )
    try:
        parts = urlsplit(url)
    except ValueError:  # `https://[::1` (an IPv6 host unclosed)
        raise wrong from None
    base = parts.path.rstrip("/")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or not all(RAW_SEGMENT.fullmatch(s.encode()) for s in base.split("/"))
        or any(s in (".", "..") for s in base.split("/"))
    ):
        raise wrong
    if base.startswith("//"):
        raise ConfigurationError(
            f"TOOLREF_UPSTREAMS gives {name!r} the base URL {redaction.url(url)!r}, whose path "
            "starts with // (every request target sent upstream would too, and a URL parser "
            "there reads what follows as a host); write the path with one / after the host, "
            "such as https://api.example.com/v1"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise wrong from None
    authorization = None
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return Upstream(name, parts.scheme, host, port, base, authorization, url)
