"""The gateway's own refusals (toolref problem+json) told to the agent in its provider's
error shape, with the fix, so that the agent shows them as they are.

An agent's SDK reads only its provider's shape: a problem document reached Claude Code as
"There's an issue with the selected model" (a 404), and an unknown key as "Please run
/login" (a 401). So the status changes where the agent would misread it: a refusal that
retrying cannot cure (a name no upstream has, a key the gateway does not know, a body it
refuses) becomes 400 (`invalid_request_error`: shown at once, never retried); 413 and 429
stay, and so do 5xx (the gateway busy or its upstream down: retrying may cure those).
Seen with Claude Code 2.1.330: a 400 shows `API Error: 400 <message>` verbatim; a 404 shows
only "There's an issue with the selected model"; a 401 "Failed to authenticate".
The provider's own errors, forwarded by the gateway, pass as they came: they are already
in the agent's shape.

A proxy between the relay and the gateway (nginx above all) answers some requests itself,
with an HTML page: 413 past its body limit, 502 when the gateway is down, 504 when it did
not answer in time. Such a page (no `X-Request-Id`, which every answer of the gateway over
HTTP carries, no JSON, and not carried by the channel, where no proxy answers) is told in
the agent's shape too, naming the proxy and the setting to change, with its status kept as
the others are.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Final

import httpx

from toolref.registry.bounded import aread_problem, is_read
from toolref.sending.channel_link import CARRIED
from toolref.sending.refusals import readable_problem, slug_of, toolref_problem
from toolref.wire.shapes import ErrorReply, error_reply

from .calls import Call
from .headers import first
from .preflight import OVERRIDE

_KEPT: Final = (413, 429)
_PAGE_BYTES: Final = 64 * 1024  # a proxy's error page, read whole when no larger
_PROXY_FIXES: Final = {
    413: (
        "its body limit is below the request's size: raise it to the gateway's "
        "TOOLREF_MAX_BODY_BYTES (nginx: client_max_body_size 32m); the first turn of a "
        "conversation the relay has not seen is sent whole"
    ),
    502: "the gateway behind it does not answer: start toolref-server where it points",
    503: "the gateway behind it does not answer: start toolref-server where it points",
    504: (
        "the gateway did not answer it in time: raise its read timeout (nginx: "
        "proxy_read_timeout 600s)"
    ),
}


async def as_provider_error(
    response: httpx.Response, call: Call, gateway: str
) -> ErrorReply | None:
    """`response` (a problem small enough to read whole: `readable_problem`) in the agent's
    shape, its body read and closed; None when it is not toolref's problem: `response`
    goes on as it came (read whole when it was a problem, its headers all kept; one whose
    body did not come within `PROBLEM_READ_S` as it comes, the bytes read first)."""
    if not readable_problem(response):
        return None
    await aread_problem(response)  # within `PROBLEM_READ_S`: else on as it comes, unread
    if not is_read(response):
        return None
    await response.aclose()
    problem = toolref_problem(response.content)
    if problem is None:  # problem+json, but not toolref's: the provider's own, forwarded
        return None
    status = response.status_code
    message = _said(problem, status, call, gateway)
    shown = status if status >= 500 or status in _KEPT else 400
    reply = error_reply(call.provider, shown, message, f"toolref_{slug_of(problem)}")
    wait = response.headers.get("retry-after")  # a quota's, an overload's: the agent waits
    return replace(reply, headers=(("retry-after", wait),)) if wait is not None else reply


def gateway_said(status: int, content: bytes, call: Call, gateway: str) -> str | None:
    """What the gateway's refusal `content` (a toolref problem, of `status`) says to the
    agent, with the fix its text cannot name: the words of its answer over HTTP
    (`as_provider_error`) and of its refusal of the relay's WebSocket
    (`websocket_mode`); None when `content` is no toolref problem."""
    problem = toolref_problem(content)
    return None if problem is None else _said(problem, status, call, gateway)


def _said(problem: dict[str, Any], status: int, call: Call, gateway: str) -> str:
    detail = str(problem.get("detail") or problem.get("title") or "")
    return f"toolref gateway {gateway}: {detail}{_fix(status, call)}"


async def proxy_error(response: httpx.Response, call: Call, gateway: str) -> ErrorReply | None:
    """A proxy's own error page in front of the gateway (see the module docstring) in the
    agent's shape, its body read and closed; None for any other answer (left unread)."""
    headers = response.headers
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    length = headers.get("content-length", "")
    if (
        response.status_code < 400
        or response.extensions.get(CARRIED)  # the channel's: the provider's, as it came
        or "x-request-id" in headers
        or media not in ("text/html", "text/plain", "")
        or "content-encoding" in headers
        or not length.isdigit()
        or int(length) > _PAGE_BYTES
    ):
        return None
    await aread_problem(response)  # as a problem is: within `PROBLEM_READ_S`, else as it is
    if not is_read(response):
        return None
    await response.aclose()
    page = response.content
    status = response.status_code
    found = re.search(rb"<title>\s*([^<]{1,120}?)\s*</title>", page, re.IGNORECASE)
    title = found[1].decode("latin-1") if found else response.reason_phrase
    server = headers.get("server") or "a proxy"
    fix = _PROXY_FIXES.get(status, "see that proxy's error log")
    message = (
        f"{server}, between the relay and the toolref gateway {gateway}, answered "
        f"{status} ({title}) itself; fix: {fix} (docs/operations.md, Behind nginx)"
    )
    shown = status if status >= 500 or status in _KEPT else 400
    return error_reply(call.provider, shown, message, f"toolref_proxy_{status}")


def _fix(status: int, call: Call) -> str:
    """What the relay's user does about a refusal the gateway's own text cannot name."""
    if status == 404:
        return (
            f" (fix: add `{call.name}=<the provider's base URL>` to TOOLREF_UPSTREAMS where "
            "the gateway runs, or give the agent the relay's URL with a name it lists: "
            f"http://{first(call.headers, 'host') or '127.0.0.1:8760'}/llm/NAME; "
            "`toolref doctor` lists them)"
        )
    if status == 401:
        return (
            " (fix: the relay sends its --key, or TOOLREF_KEY, as Toolref-Key: restart it "
            "with the tenant's key, whose SHA-256 the gateway's TOOLREF_API_KEYS holds; this "
            "is not the provider's key)"
        )
    return ""


async def not_a_gateway_reply(
    response: httpx.Response, call: Call, problem: str
) -> httpx.Response | ErrorReply:
    """A failed answer from a `--gateway` the start found wrong (`problem`, started anyway
    with `--no-gateway-check`) as a 400 that says so; any other answer as it is."""
    if response.status_code < 400:
        return response
    await response.aclose()
    said = problem.removesuffix(f"; {OVERRIDE}")
    message = f"{said} (this request was answered {response.status_code})"
    return error_reply(call.provider, 400, message, "toolref_not_a_gateway")
