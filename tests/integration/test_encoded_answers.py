"""An answer streamed with a `Content-Encoding` is no answer on either side (docs/edits.md,
"The answer as dictionary"): the receiver taps the app's encoded bytes and gives none; a
sender that sees the encoding (the SDK, the relay, fetch in Node: all keep the header)
gives none too. A page on another origin is the exception unless told: its browser decodes
the body and hides `Content-Encoding` (no CORS-safelisted header), so the page's tap saw a
plain stream and made the answer the receiver never kept, and every next edit naming it
was refused `dictionary-mismatch` and sent again. The receiver now names `Content-Encoding`
in `Access-Control-Expose-Headers` beside its own headers, so the page sees it and gives
none as well. A real server (uvicorn) with `ToolRefMiddleware` before an app that gzips its
event stream (Starlette's `GZipMiddleware`, told to compress event streams); and the relay
before the real gateway, a provider gzipping its streams behind it."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.integration.test_answer_dictionary import Provider, converse, relayed, replies, sent
from tests.support.fake_provider import wire as provider_wire
from tests.support.servers import serve
from tests.unit.test_exposed_headers import Stub
from toolref import ToolRefMiddleware
from toolref.edits import wire
from toolref.edits.answer import tap_for
from toolref.edits.wire import described

PATH = "/v1/messages"
PAGE = "http://page.test"
# The Fetch standard's CORS-safelisted response-header names: all a page on another origin
# reads of an answer, with those `Access-Control-Expose-Headers` names.
SAFELISTED = frozenset(
    {
        "cache-control",
        "content-language",
        "content-length",
        "content-type",
        "expires",
        "last-modified",
        "pragma",
    }
)
FRAMES = provider_wire.frames(
    "messages", provider_wire.Reply(text="Done. " * 40), "m-1", 10, usage=False
)


async def stream(request: Request) -> Response:
    await request.body()

    async def events() -> AsyncIterator[bytes]:
        for frame in FRAMES:
            yield frame

    return StreamingResponse(events(), media_type="text/event-stream")


def backend() -> Starlette:
    app = Starlette(routes=[Route(PATH, stream, methods=["POST"])])
    # the app's own compression, inside the receiver (event streams too: as a framework that
    # gzips every text answer does)
    app.add_middleware(GZipMiddleware, minimum_size=10, exclude_content_types=())
    app.add_middleware(ToolRefMiddleware, registry=Stub())
    return app


def page_view(headers: httpx.Headers) -> list[tuple[str, str]]:
    """The answer's headers as a page on another origin reads them (a CORS-filtered
    response): the safelisted ones and those the answer exposes."""
    exposed = {
        name.strip().lower()
        for line in headers.get_list("access-control-expose-headers")
        for name in line.split(",")
    }
    return [(k, v) for k, v in headers.multi_items() if k in SAFELISTED or k in exposed]


async def test_a_gzipped_stream_is_no_answer_on_either_side_a_page_too() -> None:
    offer = {"Toolref-Edits": str(wire.VERSION), "Accept-Encoding": "gzip"}
    async with serve(backend()) as url, httpx.AsyncClient() as client:
        for origin in ({}, {"Origin": PAGE}):
            async with client.stream("POST", url + PATH, json={}, headers=offer | origin) as got:
                raw = b"".join([piece async for piece in got.aiter_raw()])
            assert got.headers["content-encoding"] == "gzip"
            assert got.headers["toolref-edits"] == str(wire.VERSION)
            assert gzip.decompress(raw) == b"".join(FRAMES)  # what the app sent, as sent
            # the receiver's tap and a sender that sees the header: none
            assert tap_for(PATH, 200, got.headers.multi_items()) is None
            if not origin:  # no page: the answer as the app wrote it, nothing exposed
                assert "access-control-expose-headers" not in got.headers
                continue
            # The page reads the decoded body; before, Content-Encoding hidden from it, its
            # tap made an answer of it that the receiver never kept.
            seen = page_view(got.headers)
            plain = tap_for(PATH, 200, [("content-type", "text/event-stream")])
            assert plain is not None
            assert plain.feed(gzip.decompress(raw))  # a whole answer, to a tap that reads it
            assert ("content-encoding", "gzip") in seen, seen
            assert tap_for(PATH, 200, seen) is None


class GzipProvider(Provider):
    """Streams each answer gzipped (`Content-Encoding: gzip`), as an upstream does to a
    client that accepts it; `streamed` holds each answer decoded."""

    async def _answer(self, request: Request) -> Response:
        plain = await super()._answer(request)
        assert isinstance(plain, StreamingResponse)
        packer = zlib.compressobj(wbits=31)

        async def events() -> AsyncIterator[bytes]:
            async for frame in plain.body_iterator:
                assert isinstance(frame, bytes)
                yield packer.compress(frame) + packer.flush(zlib.Z_SYNC_FLUSH)
            yield packer.flush()

        headers = {"Content-Encoding": "gzip"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


@pytest.mark.engine
async def test_a_provider_gzipping_its_streams_costs_no_resend(redis: Redis) -> None:
    """Relay and gateway both see `Content-Encoding: gzip`: neither makes an answer, so no
    edit names one and none is refused; the agent reads every stream as sent."""
    provider = GzipProvider(replies(5, 11))
    async with relayed(redis, provider) as stack:
        bodies = await converse(stack, "messages", 5)
    assert provider.seen == bodies
    edits = sent(stack)
    assert len(edits) == 5  # no resend
    assert not [edit for edit in edits if "a" in described(edit)]
