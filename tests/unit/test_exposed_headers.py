"""A browser page on another origin reads no answer header its backend does not expose: the
receiver names the toolref headers each answer it marks carries in `Access-Control-Expose-
Headers` (`toolref.receiving.restoring.exposed`, `exposing`) when the request has an
`Origin`, after the app's own names, whatever CORS middleware sits outside, and never adds
a CORS allow header. tests/browser/test_cross_origin.py runs it in Chromium."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from toolref import ToolRefMiddleware
from toolref.edits import wire
from toolref.receiving.restoring import exposed

EXPOSE = b"access-control-expose-headers"


def test_each_toolref_header_named_after_the_apps_own() -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"Access-Control-Expose-Headers", b"X-Request-Id"),
        (b"toolref-edits", b"5"),
        (b"access-control-expose-headers", b"x-trace, Toolref-Edits"),
        (b"toolref-history", b"tb_x"),
        (b"toolref-history", b"tb_y"),  # named once
    ]
    assert exposed(headers) == [
        (b"content-type", b"application/json"),
        (b"toolref-edits", b"5"),
        (b"toolref-history", b"tb_x"),
        (b"toolref-history", b"tb_y"),
        (EXPOSE, b"X-Request-Id, x-trace, Toolref-Edits, Toolref-History"),
    ]


def test_added_where_the_app_exposes_none_untouched_where_it_names_them_all() -> None:
    ours = [(b"toolref-edits", b"5"), (b"toolref-savings", b"10 100")]
    assert exposed(ours) == [*ours, (EXPOSE, b"Toolref-Edits, Toolref-Savings")]
    named = [*ours, (EXPOSE, b"TOOLREF-SAVINGS,toolref-edits")]
    assert exposed(named) == named
    plain = [(b"content-type", b"text/plain"), (EXPOSE, b"")]
    assert exposed(plain) == plain  # no toolref header: nothing to say


def test_a_wildcard_of_the_apps_is_kept_and_our_names_beside_it() -> None:
    # `*` exposes every header only to a request without credentials; to one with cookies
    # it is a header named `*` (Fetch), so the names are still needed, and read either way.
    answer = [(EXPOSE, b"*"), (b"toolref-edits", b"5")]
    assert exposed(answer) == [(b"toolref-edits", b"5"), (EXPOSE, b"*, Toolref-Edits")]


class Stub:
    """A registry that answers and applies edits of this SDK's version (the offer's path
    asks nothing else of it)."""

    location = "the stub registry"

    async def verify(self) -> str | None:
        return None

    async def edits(self) -> int:
        return wire.VERSION

    async def hydrate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not asked")

    async def apply_edit(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not asked")

    async def keep_answer(self, ref: str, answer: bytes) -> None:
        raise AssertionError("not asked")


async def chat(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True}, headers={"Access-Control-Expose-Headers": "X-Request-Id"})


def backend(**cors: Any) -> Starlette:
    app = Starlette(routes=[Route("/chat", chat, methods=["POST"])])
    app.add_middleware(ToolRefMiddleware, registry=Stub())
    if cors:
        app.add_middleware(CORSMiddleware, **cors)
    return app


async def post(app: Starlette, headers: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://backend") as client:
        return await client.post("/chat", json={"messages": []}, headers=headers)


async def test_an_offer_from_a_page_behind_cors_allowing_every_header() -> None:
    """Starlette's CORSMiddleware with `allow_headers=["*"]` and no `expose_headers` keeps the
    app's own list (it sets one only when configured, and then in place of the app's)."""
    app = backend(allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])
    offer = {"Toolref-Edits": str(wire.VERSION)}
    answer = await post(app, {**offer, "Origin": "http://page.test"})
    assert answer.headers["toolref-edits"] == str(wire.VERSION)
    assert answer.headers["access-control-expose-headers"] == "X-Request-Id, Toolref-Edits"
    assert answer.headers["access-control-allow-origin"] == "*"  # CORSMiddleware's own
    # Without an Origin (no page: a server's SDK) the app's answer is as it wrote it.
    assert (await post(app, offer)).headers["access-control-expose-headers"] == "X-Request-Id"


async def test_no_cors_allow_header_is_ever_added() -> None:
    answer = await post(backend(), {"Toolref-Edits": "5", "Origin": "http://page.test"})
    assert answer.headers["access-control-expose-headers"] == "X-Request-Id, Toolref-Edits"
    assert not [name for name in answer.headers if name.startswith("access-control-allow")]


async def test_a_request_toolref_does_not_handle_is_left_alone() -> None:
    answer = await post(backend(), {"Origin": "http://page.test"})
    assert answer.headers["access-control-expose-headers"] == "X-Request-Id"
