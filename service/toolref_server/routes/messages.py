"""`POST /v1/messages:optimize`, and the answer every messages route renders (optimize and
hydrate: their messages spliced in as the JSON text made for them)."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from toolref.formats import source
from toolref.wire import endpoints
from toolref.wire.models import (
    FormatName,
    HandoffRequest,
    HydrateRequest,
    MessagesAnswer,
    MessagesResponse,
    OptimizationStats,
    OptimizeRequest,
    validated,
)
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server import documents
from toolref_server.http import codec
from toolref_server.http.operation import ApiRoute, Operation, Reply
from toolref_server.registry.conversation import (
    Conversation,
    check_length,
    conversation_of_decoded,
    joined,
    joined_size,
    references_of,
    register,
    shallow,
    stats,
)
from toolref_server.routes import request_context

Body = TypeVar("Body", OptimizeRequest, HydrateRequest, HandoffRequest)


async def conversation_of(request: Request, model: type[Body]) -> tuple[Conversation, Body]:
    decoded = await request_context.document(request)
    services = request_context.services(request)
    limit = services.settings.max_messages
    return await services.workers.run(decoded.size, _conversation, limit, decoded, model)


def _conversation(
    limit: int, decoded: documents.Decoded, model: type[Body]
) -> tuple[Conversation, Body]:
    value = decoded.value
    messages = value.get("messages") if isinstance(value, dict) else None
    if isinstance(messages, list):
        check_length(limit, len(messages))
    body = validated(model, shallow(value))
    return conversation_of_decoded(limit, decoded, body.format), body


async def answer(
    request: Request,
    fmt: FormatName,
    messages: bytes,
    references: dict[str, str] | None,
    stats: dict[str, int],
    *,
    headers: dict[str, str] | None = None,
) -> Response:
    """The answer (`MessagesResponse`): its members written through `MessagesAnswer`, its
    messages spliced in as the JSON text made for them (parsed again and packed only for a
    client that asked for msgpack): linear in them, in a worker thread when large."""
    members = MessagesAnswer(
        format=fmt,
        tool_references=references,
        optimization_stats=OptimizationStats.model_validate(stats),
    )
    written = members.model_dump(by_alias=True, exclude_none=True)
    body: dict[str, Any] = {"format": written.pop("format"), "messages": None, **written}
    workers = request_context.services(request).workers
    render = as_msgpack if codec.wants_msgpack(request) else as_json
    return await workers.run(workers.weigh(messages), render, request, body, messages, headers)


def as_json(
    request: Request, body: dict[str, Any], messages: bytes, headers: dict[str, str] | None
) -> Response:
    """`body` with its messages spliced in as their JSON text, copied once, into the body
    (megabytes: in a worker thread when large, as the resolve answer's are)."""
    return codec.render(request, body, headers=headers, encoded={"messages": messages})


def as_msgpack(
    request: Request, body: dict[str, Any], messages: bytes, headers: dict[str, str] | None
) -> Response:
    """`body` with its messages parsed from their JSON text, packed for a msgpack client."""
    body["messages"] = json.loads(messages)
    return codec.render(request, body, headers=headers)


async def optimize(request: Request) -> Response:
    tenant = request_context.tenant(request)
    request_context.require_refs_protocol(request)
    services = request_context.services(request)
    conversation, _ = await conversation_of(request, OptimizeRequest)
    registration = await register(services, tenant, conversation)
    optimized, _ = await services.workers.run(
        services.workers.weigh(*conversation.texts),
        source.replace,
        conversation.texts,
        conversation.scan,
        registration.refs,
    )
    used = dict.fromkeys([*conversation.scan.refs, *registration.refs.values()])
    answered = joined(optimized)
    figures = stats(
        joined_size(conversation.texts),
        len(answered),
        len(used),
        registration.new,
        registration.hits,
    )
    references = references_of(conversation, registration.refs)
    return await answer(request, conversation.fmt.name, answered, references, figures)


OPTIMIZE = Operation(
    "optimizeMessages",
    "Replace tool payloads in a conversation with refs (registers them)",
    Reply("The conversation with toolRef markers.", MessagesResponse),
    (400, 413, 415, 422),
    request=OptimizeRequest,
    protocol=PROTOCOL_REFS,
)

routes = [ApiRoute(endpoints.OPTIMIZE, "POST", optimize, OPTIMIZE)]
