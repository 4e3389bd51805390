"""Requests the relay does not rewrite (anything but an LLM turn), streamed both ways: to the
gateway, or to `--fallback` when the gateway cannot be reached before the body flowed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx

from toolref.asgi.hops import on_the_wire
from toolref.asgi.scope import Disconnected, Receive, Send, body_pieces, while_connected

from .calls import UNREACHABLE, Call, failed, log_call
from .headers import to_gateway, to_provider
from .problems import as_provider_error
from .replies import relay_answer, reply_error

if TYPE_CHECKING:
    from .link import GatewayLink


async def pass_through(link: GatewayLink, call: Call, receive: Receive, send: Send) -> None:
    """Any other request, streamed both ways; to the fallback too when the gateway
    cannot be reached before the body started to flow."""
    has_body = any(k.lower() in ("content-length", "transfer-encoding") for k, _ in call.headers)
    body_done = asyncio.Event()
    started = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal started
        started = True
        async for piece in body_pieces(receive):
            yield piece
        body_done.set()

    if not has_body:
        body_done.set()

    async def forward() -> None:
        upstream = link.switchboard.route(call.name)
        url = f"{link.config.gateway}/llm/{upstream}{call.suffix()}"
        request = httpx.Request(
            call.method,
            url,
            headers=on_the_wire(
                to_gateway(
                    call.headers, key=link.config.key, switched_from=None, body_changed=False
                )
            ),
            content=body() if has_body else None,
            extensions=link.extensions(call, url),
        )
        try:
            answer = await link.pool.handle_async_request(request)
        except Disconnected:
            return
        except UNREACHABLE as exc:
            fallback = link.config.fallback
            if fallback is None or started:  # a body already read cannot be sent again
                await reply_error(send, link.gateway_down(call, exc))
                return
            request = httpx.Request(
                call.method,
                fallback + call.suffix(),
                headers=on_the_wire(to_provider(call.headers)),
                content=body() if has_body else None,
                extensions=link.extensions(call, fallback + call.suffix()),
            )
            try:
                answer = await link.pool.handle_async_request(request)
            except httpx.HTTPError as again:
                await reply_error(send, failed(call, fallback, again))
                return
        except httpx.HTTPError as exc:
            await reply_error(send, failed(call, link.config.gateway, exc))
            return
        log_call(call, upstream, answer.status_code, None, None)
        told = await as_provider_error(answer, call, link.config.gateway)
        if told is not None:  # the gateway's own refusal, in the agent's shape
            await reply_error(send, told)
            return
        await relay_answer(send, answer)

    await while_connected(forward(), receive, body_done)
