"""A schemathesis check for tests/integration/test_openapi_contract.py, which the
schemathesis command loads as its hooks module (`hooks` in its configuration).

The document cannot say everything that makes a conversation valid: whether its messages
fit their format, or that summary mode needs `Toolref-Protocol: 2` (a rule across a header
and the body); nor what makes bytes an edit (`POST /v1/edits:apply` takes
`format: binary`, and the gateway, `*/*`, reads a body of that media type as an edit). So
the contract run lets the conversation operations (`CONVERSATIONS`) answer a schema-valid
request 400 or 422 as well, and the edits' (`EDITS`, and the gateway's sent as an edit)
400, and this check holds those answers to exactly those refusals: any other 400 or 422
to a schema-valid request fails, as `positive_data_acceptance` would fail it anywhere
else.

It also reads msgpack answers (`application/msgpack`, which every registry operation may
answer), so that their bodies are held to the document too, and sends an edit's bytes as
they are generated.
"""

from __future__ import annotations

from typing import Any, Final

import schemathesis
from schemathesis import Case, CheckContext, Response

from toolref.edits.wire import MEDIA_TYPE
from toolref.wire import encoding, endpoints
from toolref.wire.errors import PROBLEM_BASE

CONVERSATIONS: Final = frozenset({endpoints.HYDRATE, endpoints.OPTIMIZE, endpoints.HANDOFF})
EDITS: Final = frozenset({endpoints.APPLY_EDIT})
GATEWAY: Final = endpoints.GATEWAY


@schemathesis.deserializer(encoding.MSGPACK_TYPE)
def msgpack_answer(ctx: schemathesis.DeserializationContext, response: Response) -> Any:
    return encoding.unpackb(response.content)


@schemathesis.serializer(MEDIA_TYPE)
def edit_bytes(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def refused_for_what_no_schema_says(problem: Any, path: str, edit: bool) -> bool:
    """A problem for a conversation the document cannot describe: a message that does not
    fit the conversation's format (a 422 naming it, `message`), or protocol 1 for what
    needs 2; for an edit (`edit`: sent as one), bytes that are no edit (400
    `malformed-body`)."""
    if not isinstance(problem, dict):
        return False
    slug = str(problem.get("type", "")).removeprefix(PROBLEM_BASE)
    if edit:
        return slug == "malformed-body"
    if path == GATEWAY:
        return False
    if slug == "protocol-required":
        return True
    if slug != "validation-failed":
        return False
    return isinstance(problem.get("message"), int)


@schemathesis.check
def conversation_refusals(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    """A schema-valid request to a conversation operation refused 400 or 422 only for what
    no schema can say (`refused_for_what_no_schema_says`)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    path = case.operation.path
    if path not in CONVERSATIONS | EDITS | {GATEWAY} or response.status_code not in (400, 422):
        return None
    try:
        problem = response.json()
    except ValueError:
        problem = None
    edit = path in EDITS or case.media_type == MEDIA_TYPE
    if refused_for_what_no_schema_says(problem, path, edit):
        return None
    raise AssertionError(
        f"a schema-valid request to {case.operation.path} was refused {response.status_code} "
        f"for something the document could have said: {response.text[:500]}"
    )
