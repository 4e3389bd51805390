"""A toolref problem handed to an official LLM SDK in its API's own error shape.

An SDK reads only its provider's error body: openai 3 puts an error's `message` (or
`error.message`) in the exception it raises, so a problem+json document (whose text is its
`detail`) reached its caller as "Error code: 401" and nothing more. `toolref.Transport`
therefore hands the SDK each toolref problem it does not resend on (a gateway's refusals:
a `Toolref-Key` it does not know, an unknown upstream, a body over its limit, a quota, an
upstream down; a 409 still refused after the resends) as the error body of the request's
API (`toolref.wire.shapes`), its status and headers kept (`Retry-After` too): the SDK raises
its own `APIStatusError` for that status, with `toolref <slug>: <detail>` as its message
and, in OpenAI's shape, `toolref_<slug>` as its `code`. An upstream's own error, forwarded
by a gateway, is not toolref's: it passes as it came.
"""

from __future__ import annotations

import json
from typing import Any, Final

from toolref.registry.bounded import MAX_PROBLEM_BYTES
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import PROBLEM_BASE
from toolref.wire.shapes import error_reply, provider_of

_REWRITTEN: Final = frozenset({"content-type", "content-length", "content-encoding"})


def readable_problem(response: Any) -> bool:
    """A problem document small enough to read whole (`MAX_PROBLEM_BYTES`, as its
    `Content-Length` says) and not encoded, as toolref writes them; an `httpx` or `httpx2`
    response, not read by this."""
    headers = response.headers
    length = headers.get("content-length", "")
    return (
        headers.get("content-type", "").startswith(PROBLEM_TYPE)
        and length.isdigit()
        and int(length) <= MAX_PROBLEM_BYTES
        and "content-encoding" not in headers
    )


def toolref_problem(content: bytes) -> dict[str, Any] | None:
    """The problem document `content` holds when it is toolref's (its `type` under
    `urn:toolref:problem:`); None for anything else (a provider's own problem+json)."""
    try:
        problem = json.loads(content)
    except ValueError:
        return None
    kind = problem.get("type") if isinstance(problem, dict) else None
    return problem if isinstance(kind, str) and kind.startswith(PROBLEM_BASE) else None


def slug_of(problem: dict[str, Any]) -> str:
    """`missing-refs` of `urn:toolref:problem:missing-refs`."""
    return str(problem["type"])[len(PROBLEM_BASE) :]


def shaped(response: Any, request: Any) -> Any:
    """`response` (read whole) as the error of `request`'s API when it is a toolref problem
    (see the module docstring), a new response of the same class; else `response` itself."""
    problem = toolref_problem(response.content)
    if problem is None:
        return response
    slug = slug_of(problem)
    detail = str(problem.get("detail") or problem.get("title") or "")
    provider = provider_of(request.url.path, request.headers.multi_items())
    message = f"toolref {slug}: {detail}"
    reply = error_reply(provider, response.status_code, message, "toolref_" + slug)
    kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _REWRITTEN]
    return type(response)(
        response.status_code,
        headers=[*kept, ("content-type", reply.media_type)],
        content=reply.body,
        extensions=response.extensions,
    )
