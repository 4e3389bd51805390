"""POST /v1/context:handoff: the tool context a conversation carries to a new backend."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from toolref import formats, handoff
from toolref.handoff.dialogue import turns
from toolref.wire import endpoints
from toolref.wire.errors import DecompressedTooLargeError, ProtocolRequiredError
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.models import HandoffRequest, HandoffResponse, HandoffStats
from toolref.wire.protocol import PROTOCOL_REFS
from toolref_server.http import codec
from toolref_server.http.operation import ApiRoute, Operation, Reply
from toolref_server.registry.conversation import Conversation, resolve_markers
from toolref_server.registry.hydrate import filled_growth
from toolref_server.registry.summarizers import OpenAICompatibleSummarizer
from toolref_server.routes import request_context
from toolref_server.routes.messages import conversation_of
from toolref_server.storage.record import Record


async def handoff_context(request: Request) -> Response:
    tenant = request_context.tenant(request)
    conversation, body = await conversation_of(request, HandoffRequest)
    messages = conversation.messages
    refs = conversation.scan.refs
    if refs:
        if request_context.protocol(request) < PROTOCOL_REFS:
            raise ProtocolRequiredError(
                f"the messages carry toolRef markers, which need `{PROTOCOL_HEADER}: "
                f"{PROTOCOL_REFS}`"
            )
        services = request_context.services(request)
        held = await resolve_markers(services, tenant, refs)
        _bounded(services.settings.max_decompressed_bytes, conversation, held)
        # each record parsed once, and the fill: off the loop when large
        messages = await services.workers.run(
            services.workers.weigh(*conversation.texts)
            + sum(len(r.payload.result) for r in held.values()),
            _filled,
            messages,
            conversation.scan,
            held,
        )
    target = None
    if body.request is not None:
        formats.check_messages(body.request)
        target = formats.detect(body.request, body.request_format)
    settings = request_context.services(request).settings
    work = request_context.services(request).workers.weigh(*conversation.texts)
    summary, source = None, "none"
    if body.summarize_text:
        budget = min(handoff.SUMMARY_CHARS, body.max_tool_context_chars // 4)
        summary, source = await _text_summary(request, tenant, messages, budget, work)
    result = await request_context.services(request).workers.run(
        work,
        handoff.build,
        messages,
        conversation.fmt,
        summary=summary,
        summarize_text=body.summarize_text,
        max_tool_context_chars=body.max_tool_context_chars,
        per_result_chars=body.per_result_chars,
        kinds=settings.kinds,
    )
    # The members through the answer's model; the new request's messages, the client's own
    # with the block prepended, are put in after it (never validated and copied again).
    answer = HandoffResponse(
        format=conversation.fmt.name,
        block=result.block,
        summary_source=source,
        stats=HandoffStats.model_validate(result.stats()),
    ).model_dump(by_alias=True, exclude_none=True)
    if body.request is not None and target is not None:
        answer["messages"] = handoff.prepend(body.request, result.block, target)
    return codec.render(request, answer)


def _bounded(limit: int, conversation: Conversation, held: dict[str, Record]) -> None:
    """413 when filling the markers makes more than the inflated limit, counted as hydrate
    counts its own (`filled_growth`): 2,000 markers to one 1 MB record took a worker to 2 GB."""
    size = conversation.size + filled_growth(
        conversation, {ref: rec.payload for ref, rec in held.items()}
    )
    if size > limit:
        raise DecompressedTooLargeError(
            f"the conversation's markers fill to at least {size} bytes, over the limit of "
            f"{limit} (TOOLREF_MAX_DECOMPRESSED_BYTES); send fewer messages, or name each "
            "record once",
            limit=limit,
        )


def _filled(messages: list[Any], scan: Any, held: dict[str, Any]) -> list[Any]:
    invocations = {ref: rec.invocation() for ref, rec in held.items()}
    return formats.fill(messages, scan, invocations)


async def _text_summary(
    request: Request, tenant: str, messages: list[Any], budget: int, size: int
) -> tuple[str, str]:
    """The LLM summarizer's summary of the dialogue when it is the default (cached per
    tenant under the digest of the transcript, computed once, held to the LLM quotas);
    else, or when it is not made, the digest."""
    services = request_context.services(request)
    summarizer = services.summaries.summarizers.get(services.settings.summarizer)
    if isinstance(summarizer, OpenAICompatibleSummarizer):
        transcript = await services.workers.run(size, _transcript, messages, summarizer)
        made = await services.summaries.dialogue(tenant, transcript, summarizer, budget)
        if made is not None:
            return made.text, made.summarizer
    digest = await services.workers.run(size, handoff.digest, messages, budget)
    return digest, "digest"


def _transcript(messages: list[Any], summarizer: OpenAICompatibleSummarizer) -> str:
    """The dialogue as the model is sent it (its end, when long): linear in the messages."""
    whole = "\n\n".join(f"{t.role}: {t.text}" for t in turns(messages))
    return summarizer.clip_transcript(whole)


HANDOFF = Operation(
    "handoffContext",
    "Tool context for a backend switch: a deduplicated, size-capped block",
    Reply("The block, its stats, and the new request with it.", HandoffResponse),
    (400, 409, 413, 415, 422),
    request=HandoffRequest,
)

routes = [ApiRoute(endpoints.HANDOFF, "POST", handoff_context, HANDOFF)]
