"""RFC 9457 problem+json responses for `ToolrefError`s: as Starlette responses, and as
whole HTTP/1.1 messages for the HTTP layer, which answers before any app runs."""

from __future__ import annotations

import http
import json

from starlette.responses import Response

from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.protocol import PROTOCOL_FULL


def problem_body(error: ToolrefError) -> bytes:
    # ASCII escapes: a problem may quote back input that is not valid Unicode.
    return json.dumps(error.to_problem(), separators=(",", ":")).encode()


def problem_response(error: ToolrefError) -> Response:
    return Response(
        problem_body(error),
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
