"""Where things are: the registry's REST paths, and the one table of LLM endpoints whose
requests toolref rewrites (the relay and the transports, sending) and hydrates (the
gateway, receiving). Pure: matching only.

An LLM endpoint is matched by the end of its path, so an upstream whose base URL has its
own prefix (`https://host/api`, then `/v1/messages`) is matched as well. Anthropic's token
count (`/v1/messages/count_tokens`) carries the same conversation as `/v1/messages` and
rides the same path; OpenAI's (`/v1/responses/input_tokens`) is not rewritten yet (it
passes through as it is). Gemini's `generateContent` and `streamGenerateContent`
(`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`: the query is
not part of the path) carry their conversation under `contents`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # an annotation only: the relay's start imports this module, not pydantic
    from toolref.wire.models import FormatName

# --- the registry's REST API (prefix /v1) -----------------------------------------------

CAPABILITIES: Final = "/v1/capabilities"
INVOCATIONS: Final = "/v1/invocations"
FIND_MISSING: Final = "/v1/invocations:findMissing"
RESOLVE: Final = "/v1/invocations:resolve"
INVOCATION: Final = "/v1/invocations/{ref}"
SUMMARY: Final = "/v1/invocations/{ref}/summary"
OPTIMIZE: Final = "/v1/messages:optimize"
HYDRATE: Final = "/v1/messages:hydrate"
HANDOFF: Final = "/v1/context:handoff"
# what a receiver may name as its channel (`Toolref-Channel`): a path, of URL path
# characters, no query or fragment
CHANNEL_PATH: Final = re.compile(r"/[!$&'()*+,;=:@/A-Za-z0-9._~%-]{0,255}")
CHANNEL: Final = "/v1/channel"  # the relay's WebSocket to the gateway (toolref.websocket.channel)
APPLY_EDIT: Final = "/v1/edits:apply"  # an edit applied for a chat backend's middleware
ANSWER: Final = "/v1/answers/{recipe}"  # the answer a recipe's request streamed (its middleware)
HEALTHZ: Final = "/healthz"
READYZ: Final = "/readyz"
METRICS: Final = "/metrics"
OPENAPI: Final = "/openapi.json"
SAVINGS: Final = "/v1/savings"  # gateway usage per tenant and upstream, by the metrics key
SAVINGS_PAGE: Final = "/savings"  # the page showing it
INDEX: Final = "/"  # points to the savings page
DOCS: Final = "/docs"  # a short index of the endpoints, for a person
GATEWAY: Final = "/llm/{name}/{path}"  # the service's gateway, when it has upstreams
_UPSTREAM_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def is_upstream_name(name: str) -> bool:
    """Whether `name` can name a gateway upstream (`TOOLREF_UPSTREAMS`, the relay's
    `--switch`): 1-64 of A-Z a-z 0-9 _ . -, no colon (a usage hash's field holds it), and not
    `.` or `..` (its `/llm/{name}/` would be a dot segment naming another path)."""
    return _UPSTREAM_NAME.fullmatch(name) is not None and name not in (".", "..")


# --- LLM endpoints ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An LLM API whose requests toolref reads: its message format, and where its
    messages sit in a request body."""

    format: FormatName
    messages_key: str


# path suffix -> endpoint, the longer suffix of two first.
ENDPOINTS: Final[tuple[tuple[str, Endpoint], ...]] = (
    ("/messages/count_tokens", Endpoint("anthropic", "messages")),
    ("/messages", Endpoint("anthropic", "messages")),
    ("/chat/completions", Endpoint("openai-chat", "messages")),
    ("/responses", Endpoint("openai-responses", "input")),
    (":generateContent", Endpoint("gemini", "contents")),
    (":streamGenerateContent", Endpoint("gemini", "contents")),
)


def endpoint(method: str, path: str) -> Endpoint | None:
    """The LLM endpoint a request calls (a POST whose path ends as one of `ENDPOINTS`,
    a trailing slash ignored); None for anything to pass through as it is."""
    if method.upper() != "POST":
        return None
    trimmed = path.rstrip("/")
    for suffix, found in ENDPOINTS:
        if trimmed.endswith(suffix):
            return found
    return None


def socket_turns(path: str) -> bool:
    """Whether a WebSocket at `path` carries LLM turns, each message its client sends one
    (the OpenAI Responses API's WebSocket mode, `response.create` at `/v1/responses`): the
    path of an LLM endpoint, as its POST is matched. A socket elsewhere (OpenAI's Realtime
    API, whose client streams audio in many small messages) carries none."""
    return endpoint("POST", path) is not None
