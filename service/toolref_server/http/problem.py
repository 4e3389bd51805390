"""RFC 9457 problem+json responses for `ToolrefError`s: as Starlette responses, and as
whole HTTP/1.1 messages for the HTTP layer, which answers before any app runs.

The gateway's own refusals reach clients that know nothing of toolref: an LLM provider's
official SDK, which reads an error's text from `error.message` (OpenAI's, Gemini's,
Anthropic's shapes alike) and shows nothing else but the status ("Error code: 401").
Those (`for_llm_sdks`) also carry that member, an RFC 9457 extension: `error`, with the
detail as `message` and `toolref_<slug>` as `type`."""

from __future__ import annotations

import http
import json

from starlette.responses import Response

from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.protocol import PROTOCOL_FULL


def problem_body(error: ToolrefError, *, for_llm_sdks: bool = False) -> bytes:
    problem = error.to_problem()
    if for_llm_sdks:
        problem["error"] = {
            "type": f"toolref_{error.slug}",
            "message": f"toolref gateway: {error.detail}",
        }
    # ASCII escapes: a problem may quote back input that is not valid Unicode.
    return json.dumps(problem, separators=(",", ":")).encode()


def problem_response(error: ToolrefError, *, for_llm_sdks: bool = False) -> Response:
    return Response(
        problem_body(error, for_llm_sdks=for_llm_sdks),
        status_code=error.status,
        media_type=PROBLEM_TYPE,
        headers=error.http_headers(),
    )


def problem_message(error: ToolrefError) -> bytes:
    """`error` as a complete HTTP/1.1 response that closes the connection (protocol 1: no
    request was read, so none was negotiated)."""
    body = problem_body(error)
    phrase = http.HTTPStatus(error.status).phrase
    headers = {
        "content-type": PROBLEM_TYPE,
        "content-length": str(len(body)),
        "connection": "close",
        PROTOCOL_HEADER.lower(): str(PROTOCOL_FULL),
        **{name.lower(): value for name, value in error.http_headers().items()},
    }
    head = f"HTTP/1.1 {error.status} {phrase}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers.items()
    )
    return (head + "\r\n").encode("latin-1") + body
