"""The OpenAPI operation an endpoint serves, declared where its route is: `Operation` (what
it takes, what it answers, who may call it), its `Parameter`s and `Reply`s, and `ApiRoute`,
the Starlette route that carries one. `toolref_server.http.openapi` builds the document
from the app's routes and the gateway's operation; nothing here knows the document's
layout but the `$ref`s to its named schemas (`component`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolref.wire.protocol import PROTOCOL_LOW

Schema = Mapping[str, Any]  # a JSON Schema (2020-12, as OpenAPI 3.1 has it)

Auth = Literal["key", "metrics", "none", "gateway"]
"""Who may call: `key` an API key (`Authorization: Bearer`), which also takes from the
tenant's request rate (429); `metrics` the key TOOLREF_METRICS_KEY hashes, when set, else
requests made on the service's machine only (403 to others); `none` anyone; `gateway` an
API key in `Toolref-Key` (the gateway's tenant; 429 past its quotas)."""


def component(name: str) -> Schema:
    """A named schema of the document (`components/schemas/<name>`)."""
    return {"$ref": f"#/components/schemas/{name}"}


# In a header's pattern (ECMA 262): what may surround its value and still be read as
# absent, the whitespace Python's `str.strip()` takes from a header value (HTTP/1.1 allows
# no other control character in one).
HEADER_SPACE: Final = r"[\t \x85\xa0]*"
REF: Final = component("Ref")  # a ref, by its grammar
SUMMARIZER: Final = component("Summarizer")  # a summarizer this server offers


@dataclass(frozen=True, slots=True)
class Parameter:
    """A path, query or header parameter (a path parameter is always required)."""

    name: str
    where: Literal["path", "query", "header"]
    schema: Schema
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, slots=True)
class Header:
    """A response header."""

    name: str
    description: str
    schema: Schema
    required: bool = True


@dataclass(frozen=True, slots=True)
class Reply:
    """A response: its body is `model` (as JSON and as msgpack), or one of `media` (media
    type -> schema), or nothing when both are None."""

    description: str
    model: type[BaseModel] | None = None
    media: Mapping[str, Schema] | None = None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class Operation:
    """One method of one path, as the document tells it.

    `ok`: the answer of `status` (200 unless said; with `forwarded`, the upstream's answer:
    the `default` response).
    `problems`: the problem statuses the operation itself may answer; those of its `auth`,
    of the protocol header (400) and of admission (503, unless `admitted`: always served)
    are added by the document. `notes`: a problem status's description, where the common
    one (`openapi.PROBLEMS`) does not fit. `replies`: other answers (304). `forwarded`:
    the answers are an upstream's, any status and media type, and the operation is outside
    the registry's protocol layer (no `Toolref-Protocol` is promised). `protocol`: the
    lowest protocol version the operation takes (2: it answers with refs, and refuses a
    request without `Toolref-Protocol: 2` or more, whose header the document then requires)."""

    id: str
    summary: str
    ok: Reply
    problems: tuple[int, ...] = ()
    request: type[BaseModel] | None = None
    media: Mapping[str, Schema] | None = None  # a body of these media types, not a model
    parameters: tuple[Parameter, ...] = ()
    replies: Mapping[int, Reply] = field(default_factory=dict)
    notes: Mapping[int, str] = field(default_factory=dict)
    auth: Auth = "key"
    admitted: bool = False
    forwarded: bool = False
    description: str | None = None
    protocol: int = PROTOCOL_LOW
    status: int = 200  # of `ok` (204: `ok` has no body)


Handler = Callable[[Request], Awaitable[Response]]


class ApiRoute(Route):
    """A route serving one method, and the operation it serves there."""

    def __init__(self, path: str, method: str, endpoint: Handler, operation: Operation) -> None:
        super().__init__(path, endpoint, methods=[method])
        self.method = method
        self.operation = operation
