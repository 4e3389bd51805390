"""What /openapi.json says of the gateway: `OPERATION`, `/llm/{name}/{path}` with every
method it forwards (`operations`), each parameter declared as `gateway.gateway` and
`upstreams.route` read it (`toolref_server.http.openapi` builds the document)."""

from __future__ import annotations

from typing import Final

from toolref.edits.wire import MEDIA_TYPE
from toolref.wire.endpoints import ENDPOINTS, GATEWAY
from toolref.wire.headers import (
    EDITS_HEADER,
    HISTORY_HEADER,
    KEY_HEADER,
    PROTOCOL_HEADER,
    REFERENCES_HEADER,
    SAVINGS_HEADER,
    SWITCHED_FROM_HEADER,
)
from toolref_server.gateway.upstreams import METHODS
from toolref_server.http.operation import (
    HEADER_SPACE,
    Header,
    Operation,
    Parameter,
    Reply,
    component,
)
from toolref_server.settings import Settings

_TEXT: Final = {"type": "string"}
# The `path` parameter as `upstreams.route` takes it, decoded (ECMA 262, as JSON Schema has
# it): no separator or control character, and no dot segment.
SEGMENT_PATTERN: Final = r"^(?!\.\.?(?:;|$))[^/\\\x00-\x1f\x7f]*$"
# `Toolref-Switched-From` as `switch_at` takes it: its first `at` parameter, when it has
# one, is 1-9 digits (leading zeros aside), each part of it stripped.
_WS: Final = HEADER_SPACE
_AT: Final = f"{_WS}[aA][tT]{_WS}"
SWITCHED_FROM_PATTERN: Final = (
    rf"^[^;]*(?:;(?!{_AT}(?:=|;|$))[^;]*)*(?:;{_AT}={_WS}0*[0-9]{{1,9}}{_WS}(?:;[\s\S]*)?)?$"
)
_HYDRATED: Final = ", ".join(f"`{suffix}` ({found.format})" for suffix, found in ENDPOINTS)
# What /openapi.json says of the gateway, with every method it forwards (`METHODS`).
OPERATION: Final = Operation(
    "forward",
    "Forward to an upstream LLM API, hydrated on the way",
    Reply(
        "The upstream's answer, as it came: status, headers (but its own `Toolref-*`) and "
        "body, streamed. The gateway adds what the client lacks in `Toolref-*` headers.",
        media={"*/*": {}},
        headers=(
            Header(HISTORY_HEADER, "The recipe kept (an edit), for the next.", _TEXT, False),
            Header(
                EDITS_HEADER,
                "The edit version read here (to a request offering edits).",
                _TEXT,
                False,
            ),
            Header(REFERENCES_HEADER, "Refs of the payloads sent in full (JSON).", _TEXT, False),
            Header(SAVINGS_HEADER, "`raw=<bytes>, wire=<bytes>, ratio=<raw/wire>`.", _TEXT, False),
        ),
    ),
    (400, 404, 409, 413, 415, 422, 502, 504),
    parameters=(
        Parameter("name", "path", component("Upstream"), "The upstream (TOOLREF_UPSTREAMS)."),
        Parameter(
            "path",
            "path",
            {"type": "string", "pattern": SEGMENT_PATTERN},
            "The path at the upstream, after its base URL's, which travels with the query as "
            "the client encoded them. The gateway takes any number of segments "
            "(`/llm/anthropic/v1/messages`); as an OpenAPI parameter, whose `/` a client "
            "encodes (and an encoded `/` is refused), it is one: no `/`, `\\` or control "
            "character, and not a dot segment (`.` or `..`, before any `;`).",
        ),
        Parameter(
            PROTOCOL_HEADER,
            "header",
            _TEXT,
            "A version of 2 or more (1-9 digits): hydrate the request of a known LLM endpoint "
            "first. Any other value (none, 1, not a version) is not the gateway's to judge: "
            "the request is forwarded as it is.",
        ),
        Parameter(
            EDITS_HEADER,
            "header",
            _TEXT,
            "The edit version the sender writes: the answer says the version read here.",
        ),
        Parameter(
            SWITCHED_FROM_HEADER,
            "header",
            {"type": "string", "pattern": SWITCHED_FROM_PATTERN},
            "`<previous upstream>[; at=<n>]`: the conversation switched here; the body is "
            "rewritten for it (docs/relay.md). The first `at` parameter, if any, is 1-9 "
            "digits (leading zeros aside); other parameters are ignored.",
        ),
    ),
    notes={
        400: "A path that could leave the upstream's base (dot segments, encoded separators, "
        "control characters), a query with bytes a request target may not carry, a bad "
        f"`{SWITCHED_FROM_HEADER}`, or another `Toolref-*` header that is malformed or does "
        "not fit the body.",
        401: f"Missing or unknown `{KEY_HEADER}`: the detail (also as `error.message`, where "
        "the providers' SDKs read an error) names the header and how to get a key.",
        404: "No upstream of that name (the configured names are listed to a known key).",
        409: "Hydration: refs not held, listed in `missingRefs`; the client resends them in "
        "full. An edit: its base not held (`missingHistory`), or pieces it names not held, "
        "every one in `missingPieces`.",
        413: "Body, or body inflated, over its limit.",
        415: "Unsupported Content-Encoding of a body to hydrate.",
        422: "A body to hydrate that is invalid (a malformed ref, say).",
        429: "The tenant's quota (`quota`: requestsPerSecond, gatewayRequestsInFlight or "
        "inflatedBytesInFlight) is used up; retry after Retry-After seconds.",
        502: "The upstream is unreachable (`upstream-unreachable`).",
        503: "The gateway or the registry is serving as much as it is set to (`overloaded`), "
        "or the store is unreachable; retry after Retry-After seconds.",
        504: "The upstream did not answer in time (`upstream-timeout`).",
    },
    auth="gateway",
    forwarded=True,
    description="Any method the gateway forwards, to `{base_url}/{path}` of the upstream "
    f"`name`. A POST to an LLM endpoint it knows, whose path ends in {_HYDRATED}, sent with "
    f"`{PROTOCOL_HEADER}: 2`, is hydrated first: its toolRef markers filled, the rest of "
    "the body as the client wrote it. A request sent with "
    f"`Content-Type: {MEDIA_TYPE}` is an edit of a request the registry holds "
    "(docs/edits.md): the request it stands for is forwarded, headers and body, and "
    f"the answer carries `{HISTORY_HEADER}: tb_...`. Every other request is forwarded as it "
    "is. Each status may also be the upstream's own answer.",
)


def operations(settings: Settings) -> list[tuple[str, str, Operation]]:
    """What the gateway serves, for the OpenAPI document: `/llm/{name}/{path}` with every
    method it forwards, when it has upstreams."""
    if not settings.upstream_urls:
        return []
    return [(GATEWAY, method, OPERATION) for method in sorted(METHODS)]
