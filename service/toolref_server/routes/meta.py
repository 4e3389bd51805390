"""Negotiation, health and the API description: the routes that need no API key."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from toolref import __version__, formats
from toolref.edits.wire import VERSION as EDITS_VERSION
from toolref.wire import endpoints
from toolref.wire.canonical import REF_DIGEST_BYTES, REF_LENGTH, REF_PREFIX
from toolref.wire.encoding import JSON_TYPE
from toolref.wire.errors import AuthenticationError, StoreUnavailableError
from toolref.wire.headers import KEY_HEADER
from toolref.wire.models import Capabilities, Health, Limits, ProtocolRange, RefScheme
from toolref.wire.protocol import PROTOCOL_HIGH, PROTOCOL_LOW
from toolref_server.http import codec, openapi
from toolref_server.http.auth import Authenticator
from toolref_server.http.operation import ApiRoute, Operation, Reply
from toolref_server.metrics import CONTENT_TYPE as METRICS_TYPE
from toolref_server.routes import request_context
from toolref_server.settings import Settings
from toolref_server.storage import outage


def capabilities_of(settings: Settings, *, upstreams: bool = False) -> Capabilities:
    """What this service supports; `upstreams`: with the gateway's upstream names."""
    return Capabilities(
        protocol=ProtocolRange(low=PROTOCOL_LOW, high=PROTOCOL_HIGH),
        ref_scheme=RefScheme(
            prefix=REF_PREFIX,
            length=REF_LENGTH,
            digest="sha256",
            digest_bytes=REF_DIGEST_BYTES,
            encoding="base32-lower-nopad",
            canonicalization="rfc8785+exact-integers",
        ),
        encodings=list(codec.ENCODINGS),
        compressors=list(codec.COMPRESSORS),
        limits=Limits(
            max_body_bytes=settings.max_body_bytes,
            max_decompressed_bytes=settings.max_decompressed_bytes,
            max_depth=settings.max_depth,
            max_batch=settings.max_batch,
            max_messages=settings.max_messages,
            max_items=settings.max_items,
            max_containers=settings.max_containers,
            summary_wait_seconds=settings.summary_wait_seconds,
            summarizer_calls_per_request=settings.llm_calls_per_request,
            summarizer_calls_per_minute=settings.llm_calls_per_tenant_minute,
            requests_per_second=settings.tenant_rate or None,
            stored_bytes=settings.tenant_bytes or None,
            keep_alive_seconds=settings.keep_alive_timeout,
        ),
        ttl_seconds=settings.ttl_seconds,
        formats=list(formats.NAMES),
        summarizers=settings.summarizer_names,
        version=__version__,
        upstreams=sorted(settings.upstream_urls) if upstreams else None,
        edits=EDITS_VERSION,
    )


async def capabilities(request: Request) -> Response:
    services = request_context.services(request)
    shown = _knows_key(services.auth, request)
    document = capabilities_of(services.settings, upstreams=shown).model_dump(by_alias=True)
    return codec.render(request, document)


def _knows_key(auth: Authenticator, request: Request) -> bool:
    """Whether the request may see the upstream names: the service has no API keys, or it
    sends a known one (`Authorization: Bearer`, or the gateway's `Toolref-Key`). Nothing is
    refused here: capabilities need no key."""
    try:
        if request.headers.get("authorization"):
            auth.tenant_for(request)
        else:
            auth.tenant_for_key(request.headers.get(KEY_HEADER), header=KEY_HEADER)
    except AuthenticationError:
        return False
    return True


async def healthz(request: Request) -> Response:
    return codec.render(request, Health(status="ok").model_dump())


async def readyz(request: Request) -> Response:
    services = request_context.services(request)
    if not await services.store.ping():
        refused = services.store.refused  # it answered, and refused the credentials
        down = "the store (Redis) does not answer PING; the service is up but cannot serve refs"
        raise StoreUnavailableError(
            outage.credentials(refused) if refused is not None else down,
            retry_after=services.settings.retry_after_seconds,
        )
    misrouted = await services.store.misrouted()
    if misrouted is not None:
        raise StoreUnavailableError(misrouted, retry_after=services.settings.retry_after_seconds)
    return codec.render(request, Health(status="ready").model_dump())


async def metrics(request: Request) -> Response:
    request_context.services(request).auth.check_metrics(request)
    exported = request_context.services(request).metrics.render()
    return Response(exported, media_type=METRICS_TYPE)


async def openapi_document(request: Request) -> Response:
    """The document of this app's routes, built on its first request (routes and settings
    are fixed by then) and kept."""
    state = request.app.state
    built: dict[str, Any] | None = getattr(state, "openapi", None)
    if built is None:
        services = request_context.services(request)
        built = state.openapi = openapi.document(
            request.app.routes,
            secured=not services.auth.open,
            summarizers=tuple(services.settings.summarizer_names),
            metrics_secured=services.auth.metrics_secured,
            upstreams=tuple(sorted(services.settings.upstream_urls)),
            mounted=getattr(state, "mounted", ()),
        )
    return JSONResponse(built)


CAPABILITIES = Operation(
    "getCapabilities",
    "Negotiation document: protocol range, ref scheme, encodings, limits, upstream names",
    Reply("What this server supports.", Capabilities),
    auth="none",
)
HEALTHZ = Operation(
    "healthz", "Liveness", Reply("The process is up.", Health), auth="none", admitted=True
)
READYZ = Operation(
    "readyz", "Readiness: the store answers", Reply("Ready to serve.", Health), (503,), auth="none"
)
METRICS = Operation(
    "metrics",
    "Prometheus metrics of this process",
    Reply(
        "Prometheus text exposition format (whatever Accept says).",
        media={"text/plain": {"type": "string"}},
    ),
    auth="metrics",
)
OPENAPI = Operation(
    "openapi",
    "This document",
    Reply(
        "OpenAPI 3.1 document (always JSON, whatever Accept says).",
        media={JSON_TYPE: {"type": "object"}},
    ),
    auth="none",
)

routes = [
    ApiRoute(endpoints.CAPABILITIES, "GET", capabilities, CAPABILITIES),
    ApiRoute(endpoints.HEALTHZ, "GET", healthz, HEALTHZ),
    ApiRoute(endpoints.READYZ, "GET", readyz, READYZ),
    ApiRoute(endpoints.METRICS, "GET", metrics, METRICS),
    ApiRoute(endpoints.OPENAPI, "GET", openapi_document, OPENAPI),
]
