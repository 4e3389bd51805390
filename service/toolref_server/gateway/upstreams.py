"""The route of a gateway path to one of its upstreams (`toolref_server.settings.upstreams`).

`/llm/{name}/{path}` forwards to `{base_url}/{path}`, the path and query as the client
encoded them, byte for byte. A path that could leave the base (dot segments, plain or
percent-encoded; encoded `/` or `\\`; under a base URL without a path, a leading `//`,
which a URL parser upstream reads as a host), or holds control characters or broken
escapes, is refused before anything is read. Pure: parsing and matching only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, unquote_to_bytes

from toolref.wire.errors import BadRequestError
from toolref_server.settings.upstreams import RAW_SEGMENT, Upstream

# Methods forwarded; CONNECT (a tunnel) and TRACE (which echoes the request, credentials
# the gateway added included) are not, nor any other.
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
PREFIX: Final = "/llm/"
_RAW_PREFIX: Final = PREFIX.encode()
# A raw path segment: visible ASCII but `%`, or a `%` and two hex digits (RFC 3986).
_QUERY: Final = re.compile(rb"[\x21-\x7e]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_SAFE: Final = "/!$&'()*+,;=:@~"  # left as they are when a server gives no raw path
_SHOWN_CHARS: Final = 120  # of a refused path, quoted back to its client


@dataclass(frozen=True, slots=True)
class Route:
    """Where a gateway request goes: the upstream, and the path after `/llm/{name}`, both
    decoded (to match endpoints) and raw (what is forwarded)."""

    upstream: Upstream
    path: str  # decoded; starts with "/"
    raw_path: bytes  # as the client encoded it; starts with b"/"

    @property
    def name(self) -> str:
        return self.upstream.name

    def target(self, query: bytes) -> bytes:
        """The request target for the upstream: its base path, the raw path, the query."""
        tail = b"?" + query if query else b""
        return self.upstream.base_path.encode("ascii") + self.raw_path + tail


def route(upstreams: Mapping[str, Upstream], path: str, raw_path: bytes | None) -> Route | None:
    """The route of a `/llm/{name}/{path}` request (`path` as the server decoded it,
    `raw_path` as the client sent it; without one, the decoded path is the raw one). None
    when it names no upstream; `BadRequestError` for a path that could leave the upstream's
    base, or holds control characters or broken escapes. Linear in the path."""
    raw = raw_path.split(b"?", 1)[0] if raw_path else quote(path, safe=_SAFE).encode("ascii")
    problem = _unsafe(path, raw)
    if problem is not None:
        raise BadRequestError(
            f"the gateway path {_quoted(path)} {problem}; send /llm/{{name}}/{{path}} with "
            "plain segments, as the upstream's own API spells them (such as "
            "/llm/anthropic/v1/messages)"
        )
    name_raw, _, rest = raw[len(_RAW_PREFIX) :].partition(b"/")
    upstream = upstreams.get(_decoded(name_raw))
    if upstream is None:
        return None
    raw_rest = b"/" + rest
    if not upstream.base_path and raw_rest.startswith(b"//"):
        raise BadRequestError(
            f"the gateway path {_quoted(path)} would reach upstream {upstream.name!r} "
            "starting with // (a URL parser reads what follows as a host); send "
            "/llm/{name}/{path} with one / after the name"
        )
    return Route(upstream, _decoded(raw_rest), raw_rest)


def _unsafe(path: str, raw: bytes) -> str | None:
    """What makes a gateway path unsafe to forward, or None."""
    if not raw.startswith(_RAW_PREFIX):
        return "spells /llm/ with escapes"
    for piece in raw.split(b"/"):
        if not RAW_SEGMENT.fullmatch(piece):
            return "has a character that is not visible ASCII, or a % without two hex digits"
        if problem := _unsafe_segment(unquote_to_bytes(piece).decode("latin-1")):
            return problem
    for segment in path.split("/"):
        if problem := _unsafe_segment(segment):
            return problem
    return None


def _unsafe_segment(segment: str) -> str | None:
    if segment.split(";", 1)[0] in (".", ".."):
        return "has a dot segment (. or ..), plain or percent-encoded"
    if "/" in segment or "\\" in segment:
        return "has an encoded / or a \\"
    if _CONTROL.search(segment):
        return "has a control character (such as %00 or %0d%0a)"
    return None


def unsafe_query(query: bytes) -> bool:
    """Whether a query string holds bytes no request target may carry."""
    return _QUERY.fullmatch(query) is None


def _decoded(raw: bytes) -> str:
    return unquote(raw.decode("ascii"), errors="replace")


def _quoted(path: str) -> str:
    if len(path) <= _SHOWN_CHARS:
        return repr(path)
    return f"{path[:_SHOWN_CHARS]!r}... ({len(path)} characters)"
