"""The savings page and what it reads, and the two paths a person tries first.

- `GET /savings`: one static HTML file (`savings.html`, shipped with the package; no build
  step), which asks for the metrics key when the service has one and reads
- `GET /v1/savings`: the gateway's usage per tenant and upstream over the last hour and
  the last day, from the store's per-minute counters (`storage.usage`), by the metrics key
  (`TOOLREF_METRICS_KEY`) as `/metrics` is (without one: to this machine only);
- `GET /`: a redirect to the page; `GET /docs`: a short HTML index of the endpoints, from
  the routes' own operations, pointing to `/openapi.json`.
"""

from __future__ import annotations

import html
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
from toolref_server.routes import context
from toolref_server.settings import LOCAL_TENANT
from toolref_server.usage import MINUTE

PAGE: Final = resources.files(__package__).joinpath("savings.html").read_text("utf-8")
WINDOWS: Final = (("hour", 60), ("day", 24 * 60))
# The page runs its own inline script and style and reads this origin only.
_PAGE_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
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
    wire_bytes: int = Field(description="Request bytes received (refs, histories, zstd).")


class UsageWindow(_Model):
    name: str = Field(description="`hour` or `day`.")
    minutes: int = Field(description="The minutes it spans, the current one included.")
    rows: list[UsageRow]


class Savings(_Model):
    """What the savings page shows."""

    minute: int = Field(description="The current minute (epoch seconds // 60).")
    windows: list[UsageWindow]


async def savings(request: Request) -> Response:
    services = context.services(request)
    services.auth.check_metrics(request)
    # This worker's latest counts first; the others' are at most TOOLREF_SAMPLE_SECONDS old.
    await services.usage.flush(services.metrics.pending)
    tenants = set(services.settings.key_hashes.values()) or {LOCAL_TENANT}
    now = int(time.time() // MINUTE)
    read = await services.usage.read(tenants, now, [minutes for _, minutes in WINDOWS])
    windows = [
        UsageWindow(
            name=name,
            minutes=window.minutes,
            rows=[
                UsageRow(
                    tenant=tenant,
                    upstream=upstream,
                    requests=counts.requests,
                    resends=counts.resends,
                    raw_bytes=counts.raw,
                    wire_bytes=counts.wire,
                )
                for (tenant, upstream), counts in sorted(window.counts.items())
            ],
        )
        for (name, _), window in zip(WINDOWS, read, strict=True)
    ]
    answer = codec.render(request, Savings(minute=now, windows=windows).model_dump(by_alias=True))
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
    return HTMLResponse(body, headers=_PAGE_HEADERS)


SAVINGS = Operation(
    "getSavings",
    "Gateway usage per tenant and upstream over the last hour and day (the savings page's)",
    Reply("Requests, resends and request bytes raw and on the wire.", Savings),
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
