"""The savings page and what it reads, and the two paths a person tries first.

- `GET /savings`: one static page (`savings.html`, its script `savings_charts.js` and
  `savings.js` joined into it once, at import; shipped with the package, no build step),
  which asks for the metrics key when the service has one and reads
- `GET /v1/savings`: the gateway's usage per tenant and upstream over the last hour and
  the last day, and per minute over the day, from the store's per-minute counters
  (`storage.usage`), by the metrics key (`TOOLREF_METRICS_KEY`) as `/metrics` is (without
  one: to this machine only);
- `GET /`: a redirect to the page; `GET /docs`: a short HTML index of the endpoints, from
  the routes' own operations, pointing to `/openapi.json`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import time
from importlib import resources
from typing import Final

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from toolref.wire import endpoints
from toolref_server.http import codec
from toolref_server.http.operation import ApiRoute, Operation, Reply
from toolref_server.routes import request_context
from toolref_server.settings import LOCAL_TENANT
from toolref_server.usage import KEEP_MINUTES, MINUTE, Counts, window

WINDOWS: Final = (("hour", 60), ("day", KEEP_MINUTES))
_SCRIPTS: Final = ("savings_charts.js", "savings.js")  # in this order: the page's one script
_SCRIPT_SLOT: Final = "<script>/* savings_charts.js, savings.js */</script>"


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text("utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _page() -> tuple[str, str]:
    """The page with its script in place, and its Content-Security-Policy: its own style and
    script by their hashes (nothing else runs), data from this origin only."""
    script = '\n"use strict";\n' + "\n".join(_asset(name) for name in _SCRIPTS)
    page = _asset("savings.html")
    if page.count(_SCRIPT_SLOT) != 1:
        raise RuntimeError(f"savings.html must hold {_SCRIPT_SLOT} once")
    page = page.replace(_SCRIPT_SLOT, f"<script>{script}</script>")
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    if style is None:
        raise RuntimeError("savings.html has no <style>")
    csp = (
        f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style[1])}; "
        "connect-src 'self'; img-src data:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'"
    )
    return page, csp


PAGE, _CSP = _page()
_PAGE_HEADERS: Final = {
    "Content-Security-Policy": _CSP,
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# /docs: its inline style only, no script.
_DOCS_HEADERS: Final = {
    **_PAGE_HEADERS,
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}
_HTML: Final = {"text/html": {"type": "string"}}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class UsageRow(_Model):
    """One tenant's gateway use of one upstream in a window."""

    tenant: str
    upstream: str
    requests: int = Field(description="LLM requests through the gateway, whatever the answer.")
    resends: int = Field(description="Of them, answered 409: sent again in full by the client.")
    raw_bytes: int = Field(description="Request bytes forwarded upstream (as the client wrote).")
    wire_bytes: int = Field(
        description="Request bytes received (refs, histories, zstd), every attempt: one "
        "refused before it was forwarded and sent again too."
    )
    tokens: int = Field(
        default=0,
        description="Estimated input tokens sent upstream by requests context editing read.",
    )
    tokens_saved: int = Field(
        default=0, description="Estimated input tokens context editing saved (bytes / 4)."
    )


class UsageWindow(_Model):
    name: str = Field(description="`hour` or `day`.")
    minutes: int = Field(description="The minutes it spans, the current one included.")
    rows: list[UsageRow]


class UsagePoint(_Model):
    """One minute of one tenant's use of one upstream."""

    minute: int = Field(description="The minute (epoch seconds // 60).")
    requests: int
    resends: int
    raw_bytes: int
    wire_bytes: int
    tokens_saved: int = 0


class UsageSeries(_Model):
    tenant: str
    upstream: str
    points: list[UsagePoint] = Field(description="The minutes with gateway use, oldest first.")


class Savings(_Model):
    """What the savings page shows."""

    minute: int = Field(description="The current minute (epoch seconds // 60).")
    windows: list[UsageWindow]
    series: list[UsageSeries] = Field(
        description="Per tenant and upstream, each minute of the last day (the longest "
        "window) with gateway use: the page's view over time."
    )


def _row(tenant: str, upstream: str, counts: Counts) -> UsageRow:
    return UsageRow(
        tenant=tenant,
        upstream=upstream,
        requests=counts.requests,
        resends=counts.resends,
        raw_bytes=counts.raw,
        wire_bytes=counts.wire,
        tokens=counts.tokens,
        tokens_saved=counts.tokens_saved,
    )


async def savings(request: Request) -> Response:
    services = request_context.services(request)
    services.auth.check_metrics(request)
    # This worker's latest counts first; the others' are at most TOOLREF_SAMPLE_SECONDS old.
    await services.usage.flush(services.metrics.pending)
    tenants = set(services.settings.key_hashes.values()) or {LOCAL_TENANT}
    now = int(time.time() // MINUTE)
    minutes = await services.usage.read(tenants, now, max(span for _, span in WINDOWS))
    windows = [
        UsageWindow(
            name=name,
            minutes=span,
            rows=[
                _row(*pair, counts) for pair, counts in sorted(window(minutes, now, span).items())
            ],
        )
        for name, span in WINDOWS
    ]
    points: dict[tuple[str, str], list[UsagePoint]] = {}
    for slot, counts in sorted(minutes.items(), key=lambda item: item[0].minute):
        points.setdefault((slot.tenant, slot.upstream), []).append(
            UsagePoint(
                minute=slot.minute,
                requests=counts.requests,
                resends=counts.resends,
                raw_bytes=counts.raw,
                wire_bytes=counts.wire,
                tokens_saved=counts.tokens_saved,
            )
        )
    series = [UsageSeries(tenant=t, upstream=u, points=p) for (t, u), p in sorted(points.items())]
    found = Savings(minute=now, windows=windows, series=series)
    answer = codec.render(request, found.model_dump(by_alias=True))
    answer.headers["Cache-Control"] = "no-store"
    return answer


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE, headers=_PAGE_HEADERS)


async def index(request: Request) -> Response:
    return RedirectResponse(endpoints.SAVINGS_PAGE, status_code=302)


async def docs(request: Request) -> Response:
    """Each operation this app serves, by path and method, linked to the full document."""
    rows = [
        f"<tr><td>{html.escape(route.method)}</td><td><code>{html.escape(route.path)}</code>"
        f"</td><td>{html.escape(route.operation.summary)}</td></tr>"
        for route in request.app.routes
        if isinstance(route, ApiRoute)
    ]
    body = (
        "<!doctype html><html lang=en><meta charset=utf-8><title>toolref: endpoints</title>"
        "<style>body{font:15px system-ui,sans-serif;margin:2em;max-width:60em}"
        "td{padding:.2em .8em;border-bottom:1px solid #ddd}</style>"
        "<h1>toolref</h1><p>The whole description: "
        f'<a href="{endpoints.OPENAPI}">{endpoints.OPENAPI}</a> (OpenAPI 3.1). '
        f'Gateway savings per tenant and upstream: <a href="{endpoints.SAVINGS_PAGE}">'
        f"{endpoints.SAVINGS_PAGE}</a>.</p><table>{''.join(rows)}</table>"
    )
    return HTMLResponse(body, headers=_DOCS_HEADERS)


SAVINGS = Operation(
    "getSavings",
    "Gateway usage per tenant and upstream over the last hour and day (the savings page's)",
    Reply(
        "Requests, resends and request bytes raw and on the wire, per window and minute.", Savings
    ),
    (503,),
    auth="metrics",
)
PAGE_OPERATION = Operation(
    "savingsPage",
    "The savings page: gateway bytes saved per tenant and upstream (HTML)",
    Reply("A static page reading GET /v1/savings with the metrics key.", media=_HTML),
    auth="none",
)
INDEX = Operation(
    "index",
    "Redirect to the savings page",
    Reply("Never: 302 to /savings."),
    replies={302: Reply("To /savings.")},
    auth="none",
)
DOCS = Operation(
    "docs",
    "A short index of the endpoints (HTML), pointing to /openapi.json",
    Reply("The index.", media=_HTML),
    auth="none",
)

routes = [
    ApiRoute(endpoints.SAVINGS, "GET", savings, SAVINGS),
    ApiRoute(endpoints.SAVINGS_PAGE, "GET", page, PAGE_OPERATION),
    ApiRoute(endpoints.INDEX, "GET", index, INDEX),
    ApiRoute(endpoints.DOCS, "GET", docs, DOCS),
]
