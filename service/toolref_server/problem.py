"""RFC 9457 problem+json responses for `ToolrefError`s."""

from __future__ import annotations

from starlette.responses import Response

from toolref.errors import ToolrefError
from toolref_server.codec import PROBLEM_TYPE, dumps_json


def problem_response(error: ToolrefError) -> Response:
    return Response(
        dumps_json(error.to_problem()),
        status_code=error.status,
        media_type=PROBLEM_TYPE,
        headers=error.http_headers(),
    )
