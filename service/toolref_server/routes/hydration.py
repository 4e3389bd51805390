"""`POST /v1/messages:hydrate`: read the body once, run the registry's steps
(`toolref_server.registry.hydrate`), render the answer.

`returnMessages: "new"` asks for the messages of the request only, hydrated: a backend that
holds the history (the middleware keeps the ones it confirmed) splices them itself, so the
registry never sends it the conversation again.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from toolref import history
from toolref.history import continued_ref, history_header
from toolref.receiving.budget import SCOPE_KEY
from toolref.wire import endpoints
from toolref.wire.errors import ProtocolRequiredError
from toolref.wire.headers import HISTORY_HEADER, PROTOCOL_HEADER
from toolref.wire.models import (
    HISTORY_REF_PATTERN,
    HydrateRequest,
    MessagesResponse,
    validated,
)
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server.http.operation import (
    HEADER_SPACE,
    ApiRoute,
    Header,
    Operation,
    Parameter,
    Reply,
)
from toolref_server.registry import continuation
from toolref_server.registry.continuation import Continuation
from toolref_server.registry.conversation import (
    conversation_of_decoded,
    joined,
    joined_size,
    shallow,
    stats,
)
from toolref_server.registry.hydrate import Ask, Done, run
from toolref_server.routes import context
from toolref_server.routes.messages import answer
from toolref_server.services import Services


async def hydrate(request: Request) -> Response:
    services = context.services(request)
    ask = await read(request, services)
    if ask.protocol < PROTOCOL_REFS:
        return as_sent(request, services, ask)
    return reply(request, ask, await run(services, ask))


async def read(request: Request, services: Services) -> Ask:
    """Decode the body once. A zstd body sent against a history is inflated with that
    history's dictionary (from the cache, or from the history read whole)."""
    tenant = context.tenant(request)
    protocol = context.protocol(request)
    keep, named = history_header(request.headers.get(HISTORY_HEADER))
    loaded: Continuation | None = None
    dictionary: context.Dictionary | None = None
    if named is not None:
        wanted: str = named

        async def rebuild() -> bytes:
            nonlocal loaded
            cached = services.history_cache.get(tenant, wanted)
            if cached is not None:
                return await services.workers.run(
                    cached.size, history.dictionary_of_texts, cached.texts
                )
            loaded = await continuation.load(services, tenant, wanted)
            return await services.workers.run(loaded.size, loaded.dictionary)

        dictionary = (named, rebuild)
    decoded = await context.document(request, dictionary=dictionary)
    member = decoded.value.get("historyRef") if isinstance(decoded.value, dict) else None
    ref = continued_ref(member, named)
    if ref is not None and protocol < PROTOCOL_REFS:
        raise ProtocolRequiredError(
            f"a history ref needs `{PROTOCOL_HEADER}: {PROTOCOL_REFS}`; protocol 1 sends the "
            "whole conversation"
        )
    body = validated(HydrateRequest, shallow(decoded.value))
    if loaded is not None and loaded.ref != ref:
        loaded = None
    keep = (keep and protocol >= PROTOCOL_REFS) or ref is not None
    return Ask(tenant, protocol, body, decoded, keep, ref, loaded, request.scope.get(SCOPE_KEY))


def as_sent(request: Request, services: Services, ask: Ask) -> Response:
    """Protocol 1: the messages back as they came, no refs, nothing stored. A summarizer
    named that is not offered is refused (422) as in protocol 2."""
    if ask.body.summarizer is not None:
        services.summaries.summarizer(ask.body.summarizer)
    limit = services.settings.max_messages
    conversation = conversation_of_decoded(limit, ask.decoded, ask.body.format)
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
    return answer(request, conversation.fmt.name, messages, None, stats(size, size, 0, 0, 0))


def reply(request: Request, ask: Ask, done: Done) -> Response:
    """The messages answered (the whole conversation, or with `returnMessages: new` the
    request's own), the refs of the tool calls in them, and the figures."""
    filled, texts, kept = done.filled, done.texts, done.kept
    work, conversation = filled.work, filled.conversation
    references = done.references()
    start = len(texts) - work.requested
    sent = joined_size(conversation.texts[start:])
    full, condensed = filled.texts, texts is not filled.texts
    if ask.new_only:
        texts, full = texts[start:], full[start:]
        references = {
            pair.key: references[pair.key]
            for pair in conversation.scan.pairs
            if pair.key in references and any(site.message >= start for site, _ in pair.sides)
        }
    elif filled.ahead is not None:
        texts, full = [*filled.ahead.texts, *texts], [*filled.ahead.texts, *full]
        references = {**filled.ahead.references, **references}
    messages = joined(texts)
    figures = stats(
        joined_size(full) if condensed else len(messages),
        sent,
        len(conversation.scan.refs),
        filled.registration.new,
        filled.registration.hits + len(filled.held),
    )
    figures.update(done.summary)
    checkpoint = (kept.checkpoint, kept.checkpoint_length) if kept.checkpoint else None
    return answer(
        request,
        conversation.fmt.name,
        messages,
        references,
        figures,
        history=kept.head,
        checkpoint=checkpoint,
    )


# `Toolref-History` as `toolref.history.history_header` reads it: `?0`, `?1`, or a history
# ref (stripped). The two flags as an enum: schemathesis 4.32's coverage phase makes no
# header value for a pattern that requires a character other than a letter or a digit,
# and sent `0` in its place as a valid one.
_HISTORY_HEADER: Final[dict[str, Any]] = {
    "type": "string",
    "anyOf": [
        {"enum": ["?0", "?1"]},
        {"pattern": f"^{HEADER_SPACE}{HISTORY_REF_PATTERN[1:-1]}{HEADER_SPACE}$"},
    ],
}
HYDRATE = Operation(
    "hydrateMessages",
    "Replace toolRef markers with their payloads (registers full payloads)",
    Reply(
        "The conversation in full.",
        MessagesResponse,
        headers=(
            Header(
                HISTORY_HEADER,
                "When asked to keep the history: its ref (also `historyRef` in the body), for "
                "the next turn.",
                {"type": "string", "pattern": HISTORY_REF_PATTERN},
                required=False,
            ),
        ),
    ),
    (400, 409, 413, 415, 422),
    request=HydrateRequest,
    parameters=(
        Parameter(
            HISTORY_HEADER,
            "header",
            _HISTORY_HEADER,
            "`?1`: keep this conversation as a history and confirm its ref. A history ref: "
            "the body's messages continue that history, and a zstd body was compressed with "
            "its dictionary. `?0`: as without the header.",
        ),
    ),
)

routes = [ApiRoute(endpoints.HYDRATE, "POST", hydrate, HYDRATE)]
