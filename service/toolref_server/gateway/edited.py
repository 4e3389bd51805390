"""A gateway request sent as an edit (`Content-Type: application/vnd.toolref.edit`): the
request it stands for restored and forwarded.

The steps, in order, each a function below: read the edit within the body limit, charged
to the request's budget account (`read`); the credentials the relay sent as real headers
(`credentials`); the edit applied by the registry (`toolref_server.registry.edits`: its
base, pieces, dictionary, the request restored, the switch rewrite when
`Toolref-Switched-From` (`switched`, before anything is kept: a refusal stores nothing),
and its recipe kept, `later`); the scope the upstream is sent with: exactly the
restored headers and the body's length (`restored_scope`); the answer marked with the
recipe's ref and the bytes saved (`marked`); then `Forwarder` sends the body byte for byte
and the recipe is kept once it went (`Keeping`, started by the forwarder's `SENT_KEY`: the
keep's work runs while the upstream thinks, not before it has the request), the answer's
last message waiting for it (`kept_recipe`), and streams the answer back untouched, read as
it passes (`kept_answer`): a whole streamed answer is kept as the recipe's
(`storage.answers`) before its end event reaches the client, the dictionary of the next
edit of the conversation (`toolref.edits.answer`). A turn a channel carried
(`channel_server.on_channel`) waits for neither: its next turn comes to this process, where
a read of either waits for its write still under way (`storage.under_way`); both writes
run on if the turn is cancelled once its answer went. Its keep begins with the answer's
end, not once the body went: a fast upstream answered while the keep's work held the event
loop, and the answer waited for it (0.4 ms of a late turn). Meanwhile the keep holds the
segments the edit added (the others are its base's, which the recipe cache holds).

Everything it needs is in the request or the store, so any worker or replica serves any
turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Final

from starlette.types import Message, Receive, Scope, Send

from toolref.asgi.budget import SCOPE_KEY, Account, Budget
from toolref.asgi.hops import decoded, encoded, savings_value
from toolref.asgi.scope import Disconnected, header, read_body, replay, with_headers
from toolref.edits.answer import AnswerTap, tap_for
from toolref.edits.segments import is_secret
from toolref.edits.wire import MEDIA_TYPE, VERSION
from toolref.receiving.channel_server import on_channel
from toolref.wire.encoding import media_type
from toolref.wire.endpoints import CHANNEL
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import (
    CHANNEL_HEADER,
    EDITS_HEADER,
    HISTORY_HEADER,
    SAVINGS_HEADER,
    TOOLREF_PREFIX,
    asgi_name,
)
from toolref_server.gateway.context_edits import ContextStep
from toolref_server.gateway.forwarder import ROUTE_KEY, SENT_KEY, Forwarder
from toolref_server.registry.edits import Applied, Keeping, apply_edit, keeping_done, kept
from toolref_server.services import Services
from toolref_server.usage import Counts

_HISTORY: Final = asgi_name(HISTORY_HEADER)
_SAVINGS: Final = asgi_name(SAVINGS_HEADER)


def is_edit(scope: Scope) -> bool:
    """The request's body is an edit (its media type, any parameters and case)."""
    value = header(scope, "content-type")
    return media_type(value) == MEDIA_TYPE


async def forward_edit(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    services: Services,
    forwarder: Forwarder,
    budget: Budget,
    tenant: str,
    rewrite: Callable[[bytes], bytes] | None,
    context: ContextStep | None = None,
) -> None:
    """The edited request to the upstream, its answer back (see the module docstring).
    `rewrite`: the switch's rewrite of the body, when the conversation switched here;
    `context`: context editing's step (`context_edits.ContextStep`), last: the recipe kept
    is the client's body, what the upstream gets is edited."""
    metrics = services.metrics
    with budget.account(tenant) as account:  # the tenant's share too
        try:
            data = await read(receive, services.settings.max_body_bytes, account)

            async def then(restored: bytes) -> bytes:
                body = await switched(services, rewrite, restored)
                return body if context is None else await context(body)

            applied = await apply_edit(
                services, tenant, data, credentials(scope), account, then=then, later=True,
                outage=True,
            )  # fmt: skip
        except Disconnected:
            return
        except ToolrefError as exc:
            metrics.edits.labels(exc.slug).inc()
            raise
        metrics.edits.labels("applied").inc()
        size, ref, keeping = len(applied.body), applied.ref, applied.keeping
        stored: Callable[[], Awaitable[None]] = _nothing_to_store
        try:
            upstream_name = scope[ROUTE_KEY].name
            metrics.gateway_usage(tenant, upstream_name, Counts(raw=size, wire=applied.wire))
            upstream = restored_scope(scope, applied, size, account)
            channel = on_channel(scope)
            if keeping is not None and not channel:  # the keep runs while the upstream thinks
                upstream[SENT_KEY] = keeping.start
            hold = _holding(scope, services, tenant)
            ended = kept_recipe(send, keeping, hold, at_end=channel)
            answered, stored = kept_answer(ended, services, tenant, ref, scope["path"], hold=hold)
            marks = marked(answered, applied, size, context)
            # The body held by `receive` alone, until the forwarder sends it on: nothing
            # here holds the request's bytes (the edit, the body, its segments) while the
            # answer streams, past the account the forwarder closes once the body is sent.
            receive = replay(applied.body, receive)
            del data, applied
            await forwarder(upstream, receive, marks)
        finally:
            try:
                await stored()
            finally:
                await kept(keeping, ref)  # also when the upstream failed or the client left


async def _nothing_to_store() -> None:
    return None


async def read(receive: Receive, limit: int, account: Account) -> bytes:
    """The edit's bytes, within `limit` (TOOLREF_MAX_BODY_BYTES), charged as they come."""
    return await read_body(
        receive, limit, "send fewer segments inline, or raise TOOLREF_MAX_BODY_BYTES", account
    )


def credentials(scope: Scope) -> list[tuple[str, str]]:
    """The credentials sent as real headers, in order (toolref's own key is not one)."""
    return [
        (name, value)
        for name, value in decoded(scope["headers"])
        if is_secret(name) and not name.lower().startswith(TOOLREF_PREFIX)
    ]


async def switched(
    services: Services, rewrite: Callable[[bytes], bytes] | None, body: bytes
) -> bytes:
    """The body for the upstream a conversation switched to (`rewrite`, the gateway's
    `switch_body`, as for any request), off the loop when large."""
    if rewrite is None:
        return body
    return await services.workers.run(services.workers.weigh(body), rewrite, body)


def restored_scope(scope: Scope, applied: Applied, length: int, account: Account) -> Scope:
    """The scope the forwarder sends: the restored headers exactly (then framing for the
    body), the request's account to close once the body is sent."""
    headers: Sequence[tuple[bytes, bytes]] = encoded(applied.request.headers)
    return {
        **scope,
        "headers": [*headers, (b"content-length", str(length).encode())],
        SCOPE_KEY: account,
    }


def marked(send: Send, applied: Applied, raw: int, context: ContextStep | None = None) -> Send:
    """`send`, adding to the answer's head the recipe kept (`Toolref-History: tb_...`),
    the bytes saved (`Toolref-Savings`) and what context editing did (`Toolref-Context`)."""
    saved = None if context is None else context.saved
    told = [
        (_HISTORY, applied.ref.encode("ascii")),
        (_SAVINGS, savings_value(raw, applied.wire, saved).encode()),
        (asgi_name(EDITS_HEADER), str(VERSION).encode()),
        (asgi_name(CHANNEL_HEADER), CHANNEL.encode()),  # where the next may ride
        *(context.told() if context is not None else ()),
    ]
    return with_headers(send, told)


def _holding(scope: Scope, services: Services, tenant: str) -> Callable[[], bool]:
    """Whether the answer's end waits for its writes, asked when it comes: over HTTP always
    (the next turn may reach any replica). A channel's next turn comes to this process,
    which waits for a write still under way (`under_way`): its end waits for none, unless
    the store is behind for `tenant` (a quarter of TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT
    of its writes under way here) or for the process (a quarter of
    TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT): then it waits as over HTTP, so a client
    sending as fast as it is answered is slowed, never refused (429, 503) for the requests
    its writes keep in flight. Another tenant's writes alone never hold it."""
    if not on_channel(scope):
        return _always
    under_way = services.recipes.under_way
    settings = services.settings
    most = max(1, settings.gateway_tenant_requests_in_flight // 4)
    most_all = max(1, settings.gateway_max_requests_in_flight // 4)
    return partial(under_way.busy, tenant, most, most_all)


def _always() -> bool:
    return True


def kept_recipe(
    send: Send,
    keeping: Keeping | None,
    hold: Callable[[], bool] = _always,
    *,
    at_end: bool = False,
) -> Send:
    """`send`, holding the answer's last message until the recipe is kept when `hold()`
    says so then (`later`: kept while the upstream answers, so a turn does not wait on the
    store before it is sent on; the agent's next turn, which follows the answer's end,
    finds it on any replica). `at_end`: the keeping begins with the answer's end (a
    channel's turn: see the module docstring), before the end is sent on."""

    async def ending(message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            if hold():
                await keeping_done(keeping)
            elif at_end and keeping is not None:
                keeping.start()  # its work runs once the end went
        await send(message)

    return ending


def kept_answer(
    send: Send,
    services: Services,
    tenant: str,
    ref: str,
    path: str,
    *,
    hold: Callable[[], bool] = _always,
) -> tuple[Send, Callable[[], Awaitable[None]]]:
    """`send`, reading a streamed answer as it passes (`toolref.edits.answer.tap_for`): once
    whole, kept as recipe `ref`'s answer before the piece that ends it is sent on (one
    write; the stream's other pieces go on as they come); and what to await once the answer
    went out. Not `hold()`ing then (a channel's turn): its write begins there and runs on
    while the end goes out (`Answers.keeping`: a read of it in this process waits for it meanwhile),
    awaited by the second, shielded: a turn cancelled once its answer went (the channel
    closing) leaves the write to end."""
    tap: AnswerTap | None = None
    writing: asyncio.Task[bool] | None = None

    async def reading(message: Message) -> None:
        nonlocal tap, writing
        if message["type"] == "http.response.start":
            tap = tap_for(path, message["status"], decoded(message.get("headers", [])))
        elif tap is not None and tap.feed(message.get("body", b"")):
            answer = tap.answer  # the piece holding the end event: kept before it is sent
            if answer is not None and hold():
                await services.answers.keep(tenant, ref, answer)
            elif answer is not None:
                writing = services.answers.keeping(tenant, ref, answer)
        await send(message)

    async def stored() -> None:
        if writing is not None:
            await asyncio.shield(writing)

    return reading, stored
