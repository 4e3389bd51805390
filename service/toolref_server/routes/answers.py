"""`PUT /v1/answers/{recipe}`: the answer the request of a recipe streamed, kept for the next
edit of its conversation (`toolref.edits.answer`), by a receiver that is not the gateway: a
chat backend's `ToolRefMiddleware` or `withToolRef`, which read the app's stream as it
passed, as the gateway reads an upstream's.

The body is the answer's bytes as `AnswerTap` made them, at most `answer.MAX_ANSWER` (and not
none); they
are kept as the gateway keeps its own (`storage.answers`: the tenant's, for the store's
TTL, until the next edit of the recipe is kept). 204 once kept; 503 when they could not be
(the store down, the stored-bytes quota): the next edit naming the answer is then refused
400 `dictionary-mismatch` and sent again without it. An answer other than the client's
costs the same resend, never a wrong request: an edit names its answer by its SHA-256.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from toolref.asgi.budget import SCOPE_KEY, Account
from toolref.edits.answer import MAX_ANSWER
from toolref.edits.recipe import is_recipe_ref
from toolref.wire import endpoints
from toolref.wire.errors import (
    BodyTooLargeError,
    StoreUnavailableError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from toolref.wire.models import RECIPE_REF_PATTERN
from toolref_server.http import codec
from toolref_server.http.operation import ApiRoute, Operation, Parameter, Reply
from toolref_server.routes import request_context

_MEDIA = "application/octet-stream"


async def keep_answer(request: Request) -> Response:
    """Check the ref and the size, keep the bytes, answer 204."""
    tenant = request_context.tenant(request)  # the key first: 401 before anything else
    ref = request.path_params["recipe"]
    if not is_recipe_ref(ref):
        raise ValidationError(
            f"{ref[:40]!r} is no recipe ref (tb_ and 26 base32 letters); name the recipe "
            "the answered request's Toolref-History named"
        )
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != _MEDIA:
        raise UnsupportedMediaTypeError(
            f"{endpoints.ANSWER} takes the answer's bytes (`Content-Type: {_MEDIA}`), not "
            f"{media or 'a body without Content-Type'}; send them as AnswerTap made them"
        )
    services = request_context.services(request)
    account: Account = request.scope[SCOPE_KEY]
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER:
        raise _too_large(int(declared))
    answer = await codec.read_body(request, services.limits, inflate=False, account=account)
    if len(answer) > MAX_ANSWER:
        raise _too_large(len(answer))
    if not answer:
        raise ValidationError(
            "an empty body is no answer; send the bytes toolref.edits.answer.AnswerTap made "
            "of the whole stream"
        )
    if not await services.answers.keep(tenant, ref, answer):
        raise StoreUnavailableError(
            f"the answer of {ref} could not be kept (the store is down or the tenant's "
            "stored bytes are at their quota); nothing to do: the next edit naming it is "
            "refused 400 dictionary-mismatch and sent again without it"
        )
    return Response(status_code=204)


def _too_large(size: int) -> BodyTooLargeError:
    return BodyTooLargeError(
        f"an answer of {size} bytes is past the {MAX_ANSWER} an edit may use "
        "(toolref.edits.answer.MAX_ANSWER); keep none: the next edit goes without it",
        limit=MAX_ANSWER,
    )


KEEP_ANSWER = Operation(
    "keepAnswer",
    "Keep the answer a recipe's request streamed (a chat backend's middleware)",
    Reply("Kept: the next edit of the recipe may compress against it (edit versions 3 to 5)."),
    (400, 413, 415, 422),
    media={
        _MEDIA: {
            "type": "string",
            "format": "binary",
            "minLength": 1,
            "maxLength": MAX_ANSWER,
        }
    },
    status=204,
    parameters=(
        Parameter(
            "recipe",
            "path",
            {"type": "string", "pattern": RECIPE_REF_PATTERN},
            "The recipe the answered request made (its answer's `Toolref-History`).",
            required=True,
        ),
    ),
)

routes = [ApiRoute(endpoints.ANSWER, "PUT", keep_answer, KEEP_ANSWER)]
