"""One LLM turn sent to the gateway as an edit (`toolref.sending.editor.Editor`, issue 30).

The request goes to the same target, `POST {gateway}/llm/{upstream}{path}?{query}`, with the
edit as its body and these headers only: `Content-Type: application/vnd.toolref.edit`, the
agent's credentials as real headers (the gateway fills them into the agent's headers, which
travel inside the edit as segment 0, kept by reference while they do not change),
`Toolref-Key`, and `Toolref-Switched-From` when switching. A 409 missing-history or
missing-pieces and a 400 dictionary-mismatch are resent (at most three times, the last with
everything inline) before the agent sees anything; the answer the gateway gives after that
goes back to the agent as it arrives. A body that is not one JSON object in UTF-8 is not
sent as an edit (`NOT_AN_EDIT`), nor is anything for `RECENT` seconds after a gateway
answers 415 to the media type (`UNSUPPORTED`; then the capabilities are asked again): the
caller sends it as it came. An edit refused 400 `malformed-body`
(`Unreadable`: a gateway rolled back to a version that does not read its bytes) goes as it
came too, and the relay relearns the version (`capabilities`); each answer's
`Toolref-Edits` is learnt as well. Nor is a turn the gateway answers
503 `store-unavailable` (its store down, the turn's base not held by the process that got
it: `STORE_DOWN`): it goes as it came at once, which the gateway forwards without its
store, and so do the turns after it until `link.paused` is over (1 s, doubled while the
store stays down, at most 30: `toolref.sending.pause`; turns in flight at once and refused
together are one refusal, not one doubling each). Nor is a turn the gateway answers 413
`too-many-items` (`TooMany`: its `TOOLREF_MAX_EDIT_ENTRIES` set below the default, which the
edit's recipe is over): it goes as it came, and the gateway's limit is kept
(`link.entries`, every sender's rule, `toolref.sending.entries`), said in one line: a turn
of more entries goes as it came at once. Any other 413 (the body itself too large for the
gateway or the provider: `decompressed-too-large`, say) is the agent's to see, in its
provider's error shape. A refusal from something in front of the gateway that does not speak
toolref (no `Toolref-History`, no `Toolref-Edits`, no toolref problem: a proxy, a firewall;
`Stranger`) follows every sender's rule (`toolref.sending.stranger`): refused unread (a 4xx
but 429, a 500), the turn goes as it came, said in one line, and edits pause 5 minutes,
doubled, at most an hour (`link.paused`); a proxy's 502-504 (which may have forwarded the
edit: sent again, the provider would be called twice) or a 429 is the agent's, as it came,
edits paused 1 s, doubled, at most 30 s.

A request the edit would not shrink (header lines and body, counted alike on both sides),
and too small for a later turn to be an edit of (no message of `RELATED_MIN` bytes: the
editor's rule for a base), goes to the gateway as it came, with the tenant's key
(`as_it_is`): every sender's rule (`toolref.sending.editor.not_worth_an_edit`), here with
the relay's whole requests counted. A tiny request's edit costs more than the request (the
edit's framing, the media type), and a recipe of it would save the next turn nothing. One
that could be a base goes as an edit whatever it costs, since the turns after it are edits
of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import httpx

from toolref.asgi.hops import Pairs, end_to_end, on_the_wire, without_toolref
from toolref.asgi.workers import Workers
from toolref.edits.wire import DEFAULT_MAX_ENTRIES, MEDIA_TYPE
from toolref.registry.bounded import aread_problem
from toolref.sending.answers import (
    edits_said,
    may_be_store_down,
    may_resend,
    problem_of,
    read_answer,
    store_down,
    unreadable,
)
from toolref.sending.editor import Edit, stands_alone
from toolref.sending.editor import not_worth_an_edit as not_worth
from toolref.sending.entries import too_many_items
from toolref.sending.pause import UNREADABLE_FIRST, UNREADABLE_LONGEST
from toolref.sending.said import RECENT
from toolref.sending.stranger import no_reader, resent, stranger_pause
from toolref.wire.endpoints import endpoint
from toolref.wire.headers import HISTORY_HEADER

from .calls import Call, Meter, wire_size
from .clients import Client
from .headers import to_gateway, toolref_headers

if TYPE_CHECKING:
    from .link import GatewayLink

NOT_AN_EDIT: Final = "not-an-edit"
UNSUPPORTED: Final = "unsupported"
STORE_DOWN: Final = "store-unavailable"  # the gateway's 503 problem's slug
Declined = Literal["not-an-edit", "unsupported", "store-unavailable"]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """The gateway refused an edit written for `version` 400 `malformed-body`: it reads an
    older version (a rollback), or the edit was wrong. The version is the edit's own, read
    under the client's lock as it was made: another turn may have changed what the relay
    writes meanwhile."""

    version: int


@dataclass(frozen=True, slots=True)
class TooMany:
    """The gateway refused an edit of `sent` entries 413 `too-many-items`, naming `limit`
    (the problem's member, as it came): the turn goes as it came."""

    sent: int
    limit: object


@dataclass(frozen=True, slots=True)
class Stranger:
    """A refusal of `status` to an edit from something in front of the gateway that does
    not speak toolref (`toolref.sending.stranger`): `answer` the agent's, as it came; None:
    refused unread, the turn goes as it came."""

    status: int
    answer: httpx.Response | None


async def as_edit(
    link: GatewayLink,
    call: Call,
    client: Client,
    *,
    url: str,
    body: bytes,
    as_sent: bool,
    moved: str | None,
    meter: Meter,
) -> httpx.Response | None:
    """The gateway's answer to the turn sent as an edit (or as it came, when that is
    smaller: see the module docstring); None when it is not sent as one (a gateway without
    edits, a body that is not one JSON object): it goes as it came then. `body`: the
    agent's, inflated; `as_sent`: it is the body as the agent sent it (not inflated);
    `moved`: the `Toolref-Switched-From` value."""
    found = endpoint("POST", call.path)
    if found is None:
        return None
    config = link.config
    if not link.paused.over(time.monotonic()) or not await link.takes_edits():
        return None
    seen = link.paused.begun  # turns refused together are one outage (`Pause.refused`)
    most = link.entries.most(time.monotonic())  # the gateway's entries limit, as said
    extra = toolref_headers(config.key, moved, config.context_editing)
    plain = None  # a switched turn is rewritten by the gateway: an edit, whatever its size
    if as_sent and not moved:

        def plain() -> httpx.Request:  # made only for a first turn (`not_worth_an_edit`)
            headers = to_gateway(
                call.headers,
                key=config.key,
                switched_from=None,
                body_changed=False,
                context_editing=config.context_editing,
            )
            return httpx.Request(
                "POST",
                url,
                headers=on_the_wire(headers),
                content=body,
                extensions=link.extensions(call, url),
            )

    answer = await send_edit(
        meter,
        client,
        url=url,
        agent=call.headers,
        extra=extra,
        content=body,
        messages_key=found.messages_key,
        extensions=link.extensions(call, url),
        as_it_is=plain,
        most=most,
        version=lambda: link.capabilities.version,  # what the gateway reads, read as made
    )
    if isinstance(answer, TooMany):
        learnt = link.entries.refused(answer.sent, answer.limit, time.monotonic())
        if learnt is not None:  # said once, not each turn of a long conversation
            link.report(
                f"toolref relay: the gateway {config.gateway} refused an edit of "
                f"{answer.sent} entries (413 too-many-items): it takes a limit of {learnt} "
                "entries (its TOOLREF_MAX_EDIT_ENTRIES, 50000 by default); the turn goes as "
                "it came, and so do turns of more entries (long conversations: about 2 "
                "entries a message), whole, edits tried again in an hour; raise that "
                "setting to send them as edits"
            )
        return None
    if answer == UNSUPPORTED:
        link.capabilities.refused()
        link.report(
            f"toolref relay: the gateway {config.gateway} refused an edit (415); requests "
            f"go as they came, and the relay asks the gateway again in {RECENT:g} s"
        )
        return None
    if isinstance(answer, Unreadable):
        version = answer.version
        lower = link.capabilities.unreadable(version)
        if not lower:  # no older version to write: not a rollback, edits paused long
            link.paused.refused(time.monotonic(), seen, UNREADABLE_FIRST, UNREADABLE_LONGEST)
        link.report(
            f"toolref relay: the gateway {config.gateway} refused an edit of version "
            f"{version} as malformed (400); the turn goes as it came, and "
            + (
                "the relay asks the gateway which version it reads"
                if lower
                else f"requests go as they came for {link.paused.length:g} s"
            )
            + "; expected only after the gateway was rolled back to an older toolref: if the "
            "gateway was not rolled back, report this line and its time (the gateway's log "
            "has the request id)"
        )
        return None
    if answer == STORE_DOWN:
        link.paused.refused(time.monotonic(), seen)
        link.report(
            f"toolref relay: the gateway's store is unavailable (503); requests go as they "
            f"came for {link.paused.length:g} s, then as edits again"
        )
        return None
    if isinstance(answer, Stranger):
        pause = stranger_pause(answer.status)
        if pause is not None:
            link.paused.refused(time.monotonic(), seen, *pause)
        if answer.answer is not None:  # a proxy's 502-504, a 429: the agent's to retry
            return answer.answer
        link.report(
            f"toolref relay: something in front of the gateway {config.gateway} that does not "
            f"speak toolref (a proxy, a firewall) refused an edit {answer.status}; the turn "
            f"goes as it came, and so do turns for {link.paused.length:g} s; let "
            f"{MEDIA_TYPE} through to the gateway to send edits"
        )
        return None
    if answer == NOT_AN_EDIT:
        return None
    link.capabilities.said(edits_said(answer))  # a replica of another version, rolled
    link.paused.answered()
    return answer


def agent_headers(pairs: Pairs) -> list[tuple[str, str]]:
    """The agent's headers as they go into segment 0: end to end, none of toolref's (the
    cut itself leaves out the ones describing the hop: length, encoding, host)."""
    return without_toolref(end_to_end(pairs))


async def send_edit(
    pool: httpx.AsyncBaseTransport,
    client: Client,
    *,
    url: str,
    agent: Pairs,
    extra: Sequence[tuple[str, str]],
    content: bytes,
    messages_key: str,
    extensions: dict[str, Any],
    as_it_is: Callable[[], httpx.Request] | None = None,
    most: int = DEFAULT_MAX_ENTRIES,
    version: Callable[[], int] | None = None,
) -> httpx.Response | Declined | TooMany | Stranger | Unreadable:
    """The gateway's answer to the turn sent as an edit (resends done); `extra`: the
    relay's own headers (`Toolref-Key`, `Toolref-Switched-From`); `as_it_is`: the request
    as it came, sent instead when the edit is not worth it (`not_worth_an_edit`); `most`:
    the entries an edit holds at most (`Editor.prepare`'s); `version`: the edits version to
    write, read once the client's lock is held (a turn that waited for it writes what the
    gateway reads by then; None: the editor's as it is). The
    client's editor is used by one turn at a time (`Client.lock`), in a worker thread for a
    large body; the request's round trips hold no lock."""
    editor = client.editor
    async with client.lock:
        if version is not None:
            editor.version = version()
        work = editor.new_bytes(content, messages_key)  # what follows the body before
        edit: Edit | None
        if _WORKERS.here(work):  # in place: nothing to await, nothing to cancel midway
            edit = editor.prepare(agent_headers(agent), content, messages_key, most)
        else:
            headers = agent_headers(agent)
            edit = await _to_its_end(
                _WORKERS.run(work, editor.prepare, headers, content, messages_key, most)
            )
    if edit is None:
        return NOT_AN_EDIT
    while True:
        request = httpx.Request(
            "POST",
            url,
            headers=on_the_wire([*edit.headers, *extra]),
            content=edit.body,
            extensions=extensions,
        )
        plain = None if as_it_is is None else not_worth_an_edit(edit, request, as_it_is)
        if plain is not None:
            return await pool.handle_async_request(plain)
        response = await pool.handle_async_request(request)
        try:
            found = await _answered(client, edit, request, response, len(content))
        except BaseException:  # the agent left (or the read failed) before it was handed on:
            await _shielded(response.aclose())  # closed, not left open on the pool or channel
            raise
        if not isinstance(found, Edit):
            return found
        edit = found


async def _answered(
    client: Client, edit: Edit, request: httpx.Request, response: httpx.Response, size: int
) -> httpx.Response | Declined | TooMany | Stranger | Unreadable | Edit:
    """What `send_edit` does with the gateway's `response` to `edit`: the answer (its
    recipe confirmed), a refusal (`UNSUPPORTED`, `STORE_DOWN`, `Unreadable`, `TooMany`,
    `Stranger`),
    or the next attempt of a miss (the response read and closed). `size`: the body's
    bytes (a worker thread past `OFFLOAD_BYTES`)."""
    editor = client.editor
    if response.status_code == 415 and HISTORY_HEADER not in response.headers:
        await response.aclose()  # the gateway's (the provider's would name the recipe)
        return UNSUPPORTED
    if await _store_down(response):
        return STORE_DOWN
    if may_resend(response):
        await aread_problem(response)  # 64 KiB and `PROBLEM_READ_S`: else on as it comes
        problem = problem_of(response)
        if too_many_items(response.status_code, problem):  # `may_resend`: names no recipe
            await response.aclose()
            assert problem is not None
            return TooMany(len(edit.cut.entries), problem.get("limit"))
        async with client.lock:
            following = await _to_its_end(
                _WORKERS.run(size, editor.on_miss, edit, response.status_code, problem)
            )
        if following is not None:
            await response.aclose()
            return following
        if unreadable(response):
            await response.aclose()
            return Unreadable(edit.version)
    status = response.status_code
    if status >= 400 and no_reader(response):  # a proxy or firewall before the gateway
        if not resent(status):
            return Stranger(status, response)
        await response.aclose()
        return Stranger(status, None)
    async with client.lock:  # may wait for another turn's preparing: a cancel point
        kept = editor.confirm(edit, response.headers.get(HISTORY_HEADER))  # O(entries)
    if kept:
        answered = partial(client.answered, edit.ref)
        read_answer(response, request.url.path, answered, editor.version)
    return response


async def _shielded(work: Awaitable[None]) -> None:
    """`work` awaited to its end even when the caller is cancelled meanwhile (a second
    cancel), its failure dropped: closing a response that is being left."""
    with contextlib.suppress(BaseException):
        await asyncio.shield(work)


async def _store_down(response: httpx.Response) -> bool:
    """The gateway's own 503 `store-unavailable` (`toolref.sending.answers.store_down`;
    read and closed then): the edit was not applied, nothing of it kept. A provider's 503
    names no toolref problem."""
    if not may_be_store_down(response):  # by its head: any other answer is left unread
        return False
    await aread_problem(response)  # the gateway's is small: at most 64 KiB, PROBLEM_READ_S
    if not store_down(response):
        return False
    await response.aclose()
    return True


def not_worth_an_edit(
    edit: Edit, request: httpx.Request, plain: Callable[[], httpx.Request]
) -> httpx.Request | None:
    """The request as it came (`plain()`, made only here: a turn with a base never needs
    it) when `request`, the first attempt of `edit`, is not worth an edit by every sender's
    rule (`toolref.sending.editor.not_worth_an_edit`: no later turn could be an edit of it,
    and it puts more on the wire than the request as it came, both counted whole, header
    lines and body); else None."""
    if not stands_alone(edit):
        return None
    came = plain()
    return came if not_worth(edit, wire_size(came), wire_size(request)) else None


# Cutting and diffing a body (a SHA-256 per piece, zstd against up to 1 MiB): about 14 ms a
# MB measured; past this size of new bytes (what follows the prefix a body shares with one
# cut before: `Editor.new_bytes`; a late turn of a long conversation costs its tail), in a
# worker thread. Compressing new segments adds at most about 0.4 ms of brotli and 1 ms
# against the shipped dictionary (their budgets, 16 and 8 KiB an edit: `isolated`, `shipped`).
OFFLOAD_BYTES: Final = 256 << 10
_WORKERS: Final = Workers(None, OFFLOAD_BYTES)


T = TypeVar("T")


async def _to_its_end(work: Awaitable[T]) -> T:
    """`work` (the editor's, in a worker thread) awaited to its end even when the turn is
    cancelled (the agent hung up): the caller holds `client.lock` until the thread is done
    with the editor, which is not thread-safe, so the client's next turn never uses it at
    the same time. The cancellation is raised once it is."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise
