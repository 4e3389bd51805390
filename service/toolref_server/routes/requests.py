"""`POST /v1/edits:apply`: an edit (`application/vnd.toolref.edit`) applied for a receiver
that is not the gateway, a chat backend's `ToolRefMiddleware` or `withToolRef`: the request
it stands for, its recipe kept for the tenant (`toolref_server.registry.edits`, as the
gateway applies one), in one round trip.

The answer (`application/vnd.toolref.request`) is the request's segment 0 as the edit
restores it (its header lines, a credential's name-only: its value travels with the client's
request to its backend, never here), an empty line, then the request's body byte for byte;
`Toolref-History` names the recipe kept. Refusals are the gateway's (409 missing-history or
missing-pieces, 400, 413), and store nothing.

A caller that asks for the request as an edit (`Accept: application/vnd.toolref.edit`: the
middleware) gets its segments as a version-2 edit, uncompressed: of the recipe it names in
`Toolref-Held` when that is the edit's base (ranges of it kept, only the rest carried: the
answer costs what changed, not the conversation), else of nothing (every segment inline).
The body is then never joined here: the caller joins it. The recipe is kept while the answer
goes out (`apply_edit(later=True)`): a turn's answer does not wait on the store; a recipe that
could not be kept costs the next turn a resend (409), never this one.
"""

from __future__ import annotations

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from toolref.asgi.budget import SCOPE_KEY, Account
from toolref.edits import wire
from toolref.edits.request import REQUEST_MEDIA_TYPE, joined
from toolref.wire import endpoints
from toolref.wire.errors import UnsupportedMediaTypeError
from toolref.wire.headers import EDITS_HEADER, HELD_HEADER, HISTORY_HEADER
from toolref.wire.models import RECIPE_REF_PATTERN
from toolref_server.http import codec
from toolref_server.http.operation import ApiRoute, Header, Operation, Reply
from toolref_server.registry.edits import apply_edit
from toolref_server.routes import request_context


async def apply(request: Request) -> Response:
    """Read the edit within the body limit, apply it, answer the request it stands for."""
    services = request_context.services(request)
    tenant = request_context.tenant(request)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != wire.MEDIA_TYPE:
        raise UnsupportedMediaTypeError(
            f"{endpoints.APPLY_EDIT} takes an edit (`Content-Type: {wire.MEDIA_TYPE}`), not "
            f"{media or 'a body without Content-Type'}; send the edit as the client sent it"
        )
    account: Account = request.scope[SCOPE_KEY]  # the request's share (http.admission)
    data = await codec.read_body(request, services.limits, inflate=False, account=account)
    as_edit = wire.MEDIA_TYPE in request.headers.get("accept", "")
    applied = await apply_edit(services, tenant, data, None, account, whole=not as_edit, later=True)
    headers = {HISTORY_HEADER: applied.ref, EDITS_HEADER: str(wire.VERSION)}
    kept = BackgroundTask(applied.kept)  # the recipe kept while the answer goes out
    if as_edit:  # O(what changed) when the caller holds the base
        held = request.headers.get(HELD_HEADER)
        base = held if held is not None and held == applied.base else None
        answer = wire.encode_isolated(base, applied.as_edit(base), compress=False)
        return Response(answer, media_type=wire.MEDIA_TYPE, headers=headers, background=kept)
    body = joined(applied.head, applied.request.body)
    return Response(body, media_type=REQUEST_MEDIA_TYPE, headers=headers, background=kept)


APPLY = Operation(
    "applyEdit",
    "Apply an edited request (a chat backend's middleware): the request it stands for",
    Reply(
        "The request: its headers segment (credential lines name-only), an empty line, "
        "its body, byte for byte.",
        media={REQUEST_MEDIA_TYPE: {"type": "string", "format": "binary"}},
        headers=(
            Header(
                HISTORY_HEADER,
                "The recipe kept: the client's next edit may name it as its base.",
                {"type": "string", "pattern": RECIPE_REF_PATTERN},
            ),
        ),
    ),
    (400, 409, 413, 415),
    media={wire.MEDIA_TYPE: {"type": "string", "format": "binary"}},
)

routes = [ApiRoute(endpoints.APPLY_EDIT, "POST", apply, APPLY)]
