"""A schemathesis check for tests/integration/test_openapi_contract.py, which the
schemathesis command loads as its hooks module (`hooks` in its configuration).

The document cannot say everything that makes a conversation valid: whether its messages
fit their format, or that summary mode and history refs need `Toolref-Protocol: 2` (a rule
across a header and the body). So the contract run lets the conversation operations
(`CONVERSATIONS`) answer a schema-valid request 400 or 422 as well, and this check holds
those answers to exactly those refusals: any other 400 or 422 to a schema-valid request
fails, as `positive_data_acceptance` would fail it anywhere else.

It also reads msgpack answers (`application/msgpack`, which every registry operation may
answer), so that their bodies are held to the document too.
"""

from __future__ import annotations

from typing import Any, Final

import schemathesis
from schemathesis import Case, CheckContext, Response

from toolref.wire import encoding, endpoints
from toolref.wire.errors import PROBLEM_BASE

CONVERSATIONS: Final = frozenset({endpoints.HYDRATE, endpoints.OPTIMIZE, endpoints.HANDOFF})


@schemathesis.deserializer(encoding.MSGPACK_TYPE)
def msgpack_answer(ctx: schemathesis.DeserializationContext, response: Response) -> Any:
    return encoding.unpackb(response.content)


def refused_for_what_no_schema_says(problem: Any) -> bool:
    """A problem for a conversation the document cannot describe: a message that does not
    fit the conversation's format (a 422 naming it, `message`), the body's `historyRef`
    and the `Toolref-History` header naming two histories, or protocol 1 for what needs 2."""
    if not isinstance(problem, dict):
        return False
    slug = str(problem.get("type", "")).removeprefix(PROBLEM_BASE)
    detail = str(problem.get("detail", ""))
    if slug == "protocol-required":
        return True
    if slug != "validation-failed":
        return False
    return isinstance(problem.get("message"), int) or detail.startswith("`historyRef` is ")


@schemathesis.check
def conversation_refusals(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    """A schema-valid request to a conversation operation refused 400 or 422 only for what
    no schema can say (`refused_for_what_no_schema_says`)."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    if case.operation.path not in CONVERSATIONS or response.status_code not in (400, 422):
        return None
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if refused_for_what_no_schema_says(problem):
        return None
    raise AssertionError(
        f"a schema-valid request to {case.operation.path} was refused {response.status_code} "
        f"for something the document could have said: {response.text[:500]}"
    )
