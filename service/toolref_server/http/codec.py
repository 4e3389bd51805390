"""Request bodies in, response bodies out: media types, compression and limits.

Every limit is enforced while the body streams in, before anything is parsed or stored:
the declared length, the bytes received, and the bytes a gzip or zstd body inflates to
(the decompressor stops one output chunk past the limit, never later).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from toolref.asgi.budget import Account, charge
from toolref.asgi.workers import Workers
from toolref.wire.encoding import (
    JSON_TYPE,
    MSGPACK_TYPE,
    dumps_json,
    media_type,
    packb,
)
from toolref.wire.errors import (
    BodyTooLargeError,
    DecompressedTooLargeError,
    MalformedBodyError,
    UnsupportedMediaTypeError,
)
from toolref.wire.numbers import whole_number
from toolref_server.documents import BodyLimits
from toolref_server.http.inflater import Inflater, TooLarge

MSGPACK_ALIASES: Final = frozenset(
    {MSGPACK_TYPE, "application/x-msgpack", "application/vnd.msgpack"}
)
ENCODINGS: Final = (JSON_TYPE, MSGPACK_TYPE)
COMPRESSORS: Final = ("gzip", "zstd")


def request_decoder(request: Request) -> str:
    """'json' or 'msgpack' from Content-Type; 415 for anything else."""
    media = media_type(request.headers.get("content-type"))
    if media == JSON_TYPE or (media.startswith("application/") and media.endswith("+json")):
        return "json"
    if media in MSGPACK_ALIASES:
        return "msgpack"
    shown = media or "no Content-Type"
    raise UnsupportedMediaTypeError(
        f"cannot read a body sent as {shown!r}; send Content-Type: {JSON_TYPE} or {MSGPACK_TYPE}",
        supported=list(ENCODINGS),
    )


def _content_encoding(request: Request) -> str:
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if encoding in ("identity", "", *COMPRESSORS):
        return encoding or "identity"
    raise UnsupportedMediaTypeError(
        f"Content-Encoding {encoding!r} is not supported; send one of gzip, zstd or identity "
        "(a single encoding, not a list)",
        supported=["identity", *COMPRESSORS],
    )


async def read_body(
    request: Request,
    limits: BodyLimits,
    *,
    inflate: bool = True,
    workers: Workers | None = None,
    account: Account | None = None,
) -> bytes:
    """The request body, inflated (unless not `inflate`: then as sent, an edit say, which
    carries its own compression), with every size limit enforced while streaming. With
    `workers`, chunks inflate in a worker thread (zlib and zstd let go of the GIL), so a
    small body that inflates to the limit does not hold up the event loop. Every byte kept
    (a piece as sent, a chunk of inflated output) is charged to `account` first: past the
    process's budget, `OverloadedError` at once."""
    encoding = _content_encoding(request)
    declared = request.headers.get("content-length")
    length = whole_number(declared, 30) if declared is not None else None
    if length is not None and length > limits.max_body_bytes:
        raise _body_too_large(length, limits.max_body_bytes)
    inflater = (
        None
        if encoding == "identity" or not inflate
        else Inflater(encoding, limits.max_decompressed_bytes, account)
    )
    parts: list[bytes] = []
    received = 0
    stream: AsyncIterator[bytes] = request.stream()
    try:
        async for chunk in stream:
            received += len(chunk)
            if received > limits.max_body_bytes:
                raise _body_too_large(received, limits.max_body_bytes)
            if inflater is None:
                charge(account, len(chunk))
                parts.append(chunk)
            elif chunk and workers is not None:
                await workers.offload(inflater.feed, chunk)
            elif chunk:
                inflater.feed(chunk)
        if inflater is None:
            return b"".join(parts)
        return await workers.offload(inflater.finish) if workers else inflater.finish()
    except ClientDisconnect:
        # The client went away mid-body (a truncated upload): its fault, not a server
        # failure. Nobody reads this answer, but logs and metrics count a 400, not a 500.
        shown = f" of the {declared} declared" if declared is not None else ""
        raise MalformedBodyError(
            f"the connection closed after {received}{shown} body bytes; send the whole body"
        ) from None
    except TooLarge:
        raise DecompressedTooLargeError(
            f"the {encoding} body inflates past the limit of "
            f"{limits.max_decompressed_bytes} bytes; split the request into smaller batches",
            limit=limits.max_decompressed_bytes,
        ) from None


def _body_too_large(size: int, limit: int) -> BodyTooLargeError:
    return BodyTooLargeError(
        f"the body has at least {size} bytes, over the limit of {limit}; split the request "
        "into smaller batches or compress it (GET /v1/capabilities lists the limits)",
        limit=limit,
    )


def wants_msgpack(request: Request) -> bool:
    """True when Accept prefers msgpack to JSON."""
    accept = request.headers.get("accept")
    if not accept:
        return False
    best_msgpack = best_json = 0.0
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, raw = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(raw)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        if media in MSGPACK_ALIASES:
            best_msgpack = max(best_msgpack, quality)
        elif media in (JSON_TYPE, "application/*", "*/*"):
            best_json = max(best_json, quality)
    return best_msgpack > 0 and best_msgpack >= best_json


def render(
    request: Request,
    value: Any,
    status: int = 200,
    headers: dict[str, str] | None = None,
    encoded: dict[str, bytes | list[bytes]] | None = None,
) -> Response:
    """Encode a response body as the client's Accept header prefers. `encoded` holds members
    of `value` already encoded as compact JSON (big conversations measured for their stats),
    each as bytes or as the pieces that joined make it: a JSON answer reuses those bytes
    instead of encoding the members again."""
    if wants_msgpack(request):
        body, media = packb(value), MSGPACK_TYPE
    elif encoded:
        # One join: an encoded member (a conversation, megabytes) is copied once, into the body.
        pieces = [b"{"]
        for key, member in value.items():
            pieces += (dumps_json(key), b":")
            if key not in encoded:
                pieces.append(dumps_json(member))
            elif isinstance(given := encoded[key], bytes):
                pieces.append(given)
            else:
                pieces += given
            pieces.append(b",")
        pieces[-1] = b"}" if value else b"{}"
        body, media = b"".join(pieces), JSON_TYPE
    else:
        body, media = dumps_json(value), JSON_TYPE
    response = Response(body, status_code=status, media_type=media, headers=headers)
    response.headers["vary"] = "Accept, Toolref-Protocol"
    return response


def raw_json(body: bytes, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer whose body is already encoded (stored text, spliced as it is)."""
    response = Response(body, media_type=JSON_TYPE, headers=headers)
    response.headers["vary"] = "Accept, Toolref-Protocol"
    return response
