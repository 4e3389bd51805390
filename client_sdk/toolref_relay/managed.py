"""One LLM turn through the client's manager (`toolref.AsyncTransport`): the path before
edits, taken with a gateway that does not take them, `--no-edits`, a body that is not one
JSON object, or a turn answered 413 (retried once with its biggest tool results registered
first, so that they travel as refs; or answered 413 naming them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from toolref.sending.manager import ToolReferenceManager
from toolref.sending.transport import AsyncTransport, LLMRequest
from toolref.wire.errors import ToolrefError
from toolref.wire.shapes import ErrorReply, error_reply

from . import oversize
from .calls import Call, Meter
from .headers import to_gateway

if TYPE_CHECKING:
    from .app import Relay


async def managed(
    relay: Relay,
    call: Call,
    manager: ToolReferenceManager,
    *,
    url: str,
    content: bytes,
    changed: bool,
    moved: str | None,
    meter: Meter,
    llm: LLMRequest | Callable[[], LLMRequest | None] | None,
) -> httpx.Response | ErrorReply:
    """The gateway's answer to the turn sent through `manager` (see the module docstring).
    `llm`: the request read, or how to read it (only a 413 needs it)."""
    headers = to_gateway(
        call.headers, key=relay.config.key, switched_from=moved, body_changed=changed
    )

    def build() -> httpx.Request:
        return httpx.Request(
            "POST", url, headers=headers, content=content, extensions=relay.extensions()
        )

    # The gateway's problems as it sent them: `problems` tells them to the agent itself.
    transport = AsyncTransport(meter, manager=manager, shape_problems=False)
    answer: httpx.Response | ErrorReply = await transport.handle_async_request(build())
    if isinstance(answer, httpx.Response) and answer.status_code == 413:
        answer = await _smaller(
            relay,
            answer,
            transport=transport,
            build=build,
            llm=llm() if callable(llm) else llm,
            manager=manager,
            call=call,
        )
    return answer


async def _smaller(
    relay: Relay,
    refused: httpx.Response,
    *,
    transport: AsyncTransport,
    build: Callable[[], httpx.Request],
    llm: LLMRequest | None,
    manager: ToolReferenceManager,
    call: Call,
) -> httpx.Response | ErrorReply:
    """The answer to a 413: the request again, once, with its biggest tool results
    registered first (so they travel as refs); or a 413 naming them."""
    await refused.aclose()
    items = oversize.inline_items(llm) if llm is not None else []
    chosen = oversize.worth_registering(items, manager.confirmed)
    if not chosen or not manager.refs_accepted:
        tried = "no tool result in it could be moved off the wire"
        return _too_large(call, items, tried)
    try:
        registered = await relay.registry_client().register([i.invocation for i in chosen])
    except (ToolrefError, httpx.HTTPError) as exc:
        tried = f"registering its {len(chosen)} biggest tool results failed ({exc})"
        return _too_large(call, items, tried)
    manager.confirm(r.ref for r in registered)
    answer = await transport.handle_async_request(build())
    if answer.status_code != 413:
        return answer
    await answer.aclose()
    moved = sum(i.size for i in chosen)
    tried = f"a retry with its {len(chosen)} biggest tool results ({moved} bytes) as refs"
    return _too_large(call, items, tried + " was refused too")


def _too_large(call: Call, items: list[oversize.InlineItem], tried: str) -> ErrorReply:
    message = oversize.too_large_message(items, tried)
    return error_reply(call.provider, 413, message, "toolref_request_too_large")
