"""What every route needs from a request: tenant, protocol, a validated body."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import pydantic
from starlette.requests import Request

from toolref.asgi.budget import SCOPE_KEY, Account
from toolref.wire.canonical import Ref
from toolref.wire.errors import (
    BatchTooLargeError,
    InvalidRefError,
    ProtocolRequiredError,
)
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server import documents
from toolref_server.http import codec
from toolref_server.services import Services

Model = TypeVar("Model", bound=pydantic.BaseModel)


def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def protocol(request: Request) -> int:
    version: int = request.scope.get("state", {}).get("protocol", 1)
    return version


def tenant(request: Request) -> str:
    """The request's tenant, whose request-rate quota it takes a token of (401 without a
    known key, 429 past the quota; both before the body is read)."""
    found = services(request)
    name = found.auth.tenant_for(request)
    found.rate.admit(name)
    account: Account | None = request.scope.get(SCOPE_KEY)
    if account is not None:  # its body charges the tenant's share from now on
        account.bind(name)
    return name


def require_refs_protocol(request: Request) -> None:
    """Ref endpoints answer with refs, which a protocol-1 client never receives."""
    if protocol(request) < PROTOCOL_REFS:
        raise ProtocolRequiredError(
            f"{request.url.path} deals in refs; send `{PROTOCOL_HEADER}: {PROTOCOL_REFS}` "
            "(a request without the header is protocol 1, which never receives refs)"
        )


async def body(request: Request) -> Any:
    """The decoded request body, every limit enforced before parsing."""
    return (await document(request, messages_key=None)).value


async def document(request: Request, *, messages_key: str | None = "messages") -> documents.Decoded:
    """The request body decoded once, every limit enforced before parsing, with the text
    of each message under `messages_key` as sent. Message routes send that text back, so
    strings UTF-8 cannot carry are refused."""
    limits = services(request).limits
    workers = services(request).workers
    decoder = codec.request_decoder(request)
    # This request's share of the process's budget of bodies in flight (admission.py).
    account: Account | None = request.scope.get(SCOPE_KEY)
    data = await codec.read_body(request, limits, workers=workers, account=account)
    echoed = messages_key is not None and decoder == "json"
    work = workers.weigh_parse(data, packed=decoder != "json")  # the steps after: theirs
    return await workers.run(work, _decoded, data, decoder, limits, messages_key, echoed)


def _decoded(
    data: bytes, decoder: str, limits: documents.BodyLimits, messages_key: str | None, echoed: bool
) -> documents.Decoded:
    decoded = documents.decode_document(data, decoder, limits, messages_key)
    if echoed:
        documents.check_text(data, decoded.value)
    return decoded


def check_batch(value: Any, member: str, request: Request) -> None:
    """413 for a batch over the limit, checked before any item is validated."""
    limit = services(request).settings.max_batch
    items = value.get(member) if isinstance(value, dict) else None
    if isinstance(items, list) and len(items) > limit:
        raise BatchTooLargeError(
            f"`{member}` has {len(items)} items, over the limit of {limit}; send them in "
            f"batches of at most {limit}",
            limit=limit,
        )


def parse_refs(texts: Sequence[str]) -> list[Ref]:
    refs = []
    for index, text in enumerate(texts):
        try:
            refs.append(Ref.parse(text))
        except InvalidRefError as exc:
            raise InvalidRefError(f"/refs/{index}: {exc.detail}", **exc.extra) from None
    return refs
