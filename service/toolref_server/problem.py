"""RFC 9457 problem+json responses for `ToolrefError`s."""

from __future__ import annotations

import json

from starlette.responses import Response

from toolref.encoding import PROBLEM_TYPE
from toolref.errors import ToolrefError


def problem_response(error: ToolrefError) -> Response:
    # ASCII escapes: a problem may quote back input that is not valid Unicode.
    body = json.dumps(error.to_problem(), separators=(",", ":")).encode()
    return Response(
        body,
        status_code=error.status,
        media_type=PROBLEM_TYPE,
        headers=error.http_headers(),
    )
