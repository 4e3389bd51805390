"""`POST /v1/messages:hydrate`: read the body once, run the registry's steps
(`toolref_server.registry.hydrate`), render the answer. A body of the retired history refs
(`historyRef`, `returnMessages`, `checkpoint`) is refused first, 400 `history-refs-retired`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from toolref.asgi.budget import SCOPE_KEY
from toolref.receiving.hydrator import retired
from toolref.wire import endpoints
from toolref.wire.errors import HistoryRefsRetiredError, ProtocolRequiredError
from toolref.wire.headers import PROTOCOL_HEADER, REGISTRATION_HEADER
from toolref.wire.models import HydrateRequest, MessagesResponse, validated
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server.http.operation import ApiRoute, Header, Operation, Reply
from toolref_server.registry.conversation import (
    conversation_of_decoded,
    joined,
    joined_size,
    shallow,
    stats,
)
from toolref_server.registry.hydrate import Ask, Done, run
from toolref_server.routes import request_context
from toolref_server.routes.messages import answer
from toolref_server.services import Services


async def hydrate(request: Request) -> Response:
    services = request_context.services(request)
    ask = await read(request)
    if ask.protocol < PROTOCOL_REFS:
        return await as_sent(request, services, ask)
    return await reply(request, await run(services, ask))


async def read(request: Request) -> Ask:
    """Decode the body once (a request of the retired history refs refused first)."""
    tenant = request_context.tenant(request)
    protocol = request_context.protocol(request)
    retired({k.lower(): v for k, v in request.headers.items()})
    decoded = await request_context.document(request)
    if isinstance(decoded.value, dict):
        named = [k for k in _RETIRED_MEMBERS if k in decoded.value]
        if named:
            raise HistoryRefsRetiredError(
                f"the body names {', '.join(named)}: history refs were retired in toolref "
                "0.3, which sends each request as an edit; upgrade the client's toolref "
                "SDK, or send the whole conversation without them"
            )
    body = validated(HydrateRequest, shallow(decoded.value))
    return Ask(tenant, protocol, body, decoded, request.scope.get(SCOPE_KEY))


_RETIRED_MEMBERS = ("historyRef", "returnMessages", "checkpoint")


async def as_sent(request: Request, services: Services, ask: Ask) -> Response:
    """Protocol 1: the messages back as they came, no refs, nothing stored. A summarizer
    named that is not offered is refused (422) as in protocol 2."""
    if ask.body.summarizer is not None:
        services.summaries.summarizer(ask.body.summarizer)
    limit, decoded = services.settings.max_messages, ask.decoded
    # read, detected and paired as in protocol 2: off the loop when large
    conversation = await services.workers.run(
        decoded.size, conversation_of_decoded, limit, decoded, ask.body.format
    )
    if conversation.scan.refs or ask.body.mode == "summary":
        what = (
            "toolRef markers"
            if conversation.scan.refs
            else "summary mode (its placeholders name refs)"
        )
        raise ProtocolRequiredError(
            f"the request uses {what}, which needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; "
            "protocol 1 sends and receives full payloads"
        )
    messages = joined(conversation.texts)
    size = len(messages)
    return await answer(request, conversation.fmt.name, messages, None, stats(size, size, 0, 0, 0))


async def reply(request: Request, done: Done) -> Response:
    """The messages answered, the refs of the tool calls in them, and the figures; at the
    tenant's stored-bytes quota, `Toolref-Registration` says nothing was registered."""
    filled, texts = done.filled, done.texts
    conversation = filled.conversation
    messages = joined(texts)
    condensed = texts is not filled.texts
    figures = stats(
        joined_size(filled.texts) if condensed else len(messages),
        joined_size(conversation.texts),
        len(conversation.scan.refs),
        filled.registration.new,
        filled.registration.hits + len(filled.held),
    )
    figures.update(done.summary)
    headers = None
    if filled.registration.skipped is not None:
        headers = {REGISTRATION_HEADER: f"skipped; quota={filled.registration.skipped}"}
    references = done.references()
    fmt = conversation.fmt.name
    return await answer(request, fmt, messages, references, figures, headers=headers)


_REGISTRATION = Header(
    REGISTRATION_HEADER,
    "`skipped; quota=storedBytes`: the payloads sent in full were not registered (the "
    "tenant's stored-bytes quota is used up); the messages are answered all the same, and "
    "those calls have no ref in `toolReferences`.",
    {"type": "string"},
    required=False,
)

HYDRATE = Operation(
    "hydrateMessages",
    "Replace toolRef markers with their payloads (registers full payloads)",
    Reply("The conversation in full.", MessagesResponse, headers=(_REGISTRATION,)),
    (400, 409, 413, 415, 422),
    request=HydrateRequest,
)

routes = [ApiRoute(endpoints.HYDRATE, "POST", hydrate, HYDRATE)]
