"""An edited request (`application/vnd.toolref.edit`) restored for the app behind a chat
backend's middleware, through the registry (`Registry.apply_edit`: one round trip, the
recipe kept there; what this process holds, `held`, only saves bytes): any worker or
replica serves any turn.

The steps, each a function below: the edit read within the body limit, charged to the
request's account (`read`); applied by the registry; the app's scope (`restored_scope`):
the headers of segment 0, each credential line filled with the request's real header of
that name, then the request's own headers segment 0 does not name (what a browser adds:
`cookie`, `origin`, ...) but the body's framing and toolref's, then the body's length; the
body replayed; the answer marked (`marked`: the recipe kept, that edits are read here, the
bytes saved), streamed as the app sends it.

A refusal the client resends on (409 `missing-history` or `missing-pieces`, 400
`dictionary-mismatch`) is answered to it as it is, and it resends by itself
(`toolref.sending.editor`). Any other failure, the edit's own (over a limit, a version this
registry does not read) or the registry's (it cannot be reached, refuses this backend's
key, is over a quota or busy, its store is down), is answered 415
(`unsupported-media-type`), on which the client sends the request as it is (and pauses its
edits to this endpoint for a while: `toolref.sending.pause`): chatting never stops. The 415
names the refusal it stands for (`cause`, its problem type): for the registry's 413
`too-many-items` (its `TOOLREF_MAX_EDIT_ENTRIES` below the default) with its `limit`, on
which a sender applies the entries rule instead of the pause (`toolref.sending.entries`:
the limit learnt, no pause), as to a gateway's 413; for its 400 `malformed-body` (an edit
of a version it does not read: rolled back) the version below the edit's bytes, no pause
(`toolref.sending.said`), as to a gateway's 400, the middleware asking the registry's
version again before it answers (`refused`: `toolref.receiving.registry_edits`); a sender
of stop 58 or older still gets the 415 it resends on (and pauses). Only this process's own budget
refusing the restored body is a 503 `overloaded` (retried later, as the request as it is
would be charged too).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final
from urllib.parse import quote

from toolref.asgi.budget import SCOPE_KEY, Account
from toolref.asgi.hops import decoded, encoded, savings_value
from toolref.asgi.scope import (
    ASGIApp,
    Disconnected,
    Message,
    Receive,
    Scope,
    Send,
    header,
    read_body,
    replay,
    with_headers,
)
from toolref.edits import wire
from toolref.edits.answer import AnswerTap, tap_for
from toolref.edits.segments import describes_hop, is_secret, restore_headers
from toolref.receiving.held import HeldRequests, base_of
from toolref.registry.answers import AppliedEdit
from toolref.registry.port import Registry
from toolref.wire.encoding import media_type
from toolref.wire.errors import (
    BadRequestError,
    BodyTooLargeError,
    DictionaryMismatchError,
    MissingHistoryError,
    MissingPiecesError,
    OverloadedError,
    ToolrefError,
    TooManyItemsError,
    UnsupportedMediaTypeError,
)
from toolref.wire.headers import (
    CHANNEL_HEADER,
    EDITS_HEADER,
    HISTORY_HEADER,
    SAVINGS_HEADER,
    TOOLREF_PREFIX,
    asgi_name,
)

# The body's framing: the restored body's own is written anew.
_FRAMING: Final = frozenset(
    {"content-type", "content-length", "content-encoding", "transfer-encoding"}
)
# What the client's HTTP stack adds to the edit request itself (httpx's, fetch's defaults):
# of these, the values the app's SDK wrote, in segment 0, are the request's.
_CLIENT_DEFAULTS: Final = frozenset({"user-agent", "accept", "accept-encoding", "accept-language"})
_PATH_SAFE: Final = "/!$&'()*+,;=:@~"  # what a URL path keeps unquoted (RFC 3986)
log = logging.getLogger("toolref.edits")
# The refusals of an edit its client resends on (`toolref.sending.editor.Editor.on_miss`: the
# base or pieces not held, inline bytes against another dictionary), answered as they are.
# Any other (an edit over a limit, one this registry does not read) is answered 415: the
# client sends the request as it is, which the app takes, rather than fail every turn.
RESENT_ON: Final = MissingHistoryError | MissingPiecesError | DictionaryMismatchError


def is_edit(scope: Scope) -> bool:
    """The request's body is an edit (its media type, any parameters and case)."""
    value = header(scope, "content-type")
    return media_type(value) == wire.MEDIA_TYPE


async def restore_edit(
    app: ASGIApp,
    registry: Registry,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    account: Account,
    max_body_bytes: int,
    max_restored_bytes: int,
    problem: Callable[[Send, ToolrefError], Awaitable[None]],
    held: HeldRequests | None = None,
    channel: str | None = None,
    version: int = wire.VERSION,
    refused: Callable[[ToolrefError], Awaitable[None]] | None = None,
) -> bool:
    """One edited request to `app` (see the module docstring); `problem` answers a refusal.
    False when the registry failed (the client was told to send the request as it is).
    `held`: the requests this process restored, each the base of its conversation's next
    edit (the registry then answers what changed). `channel`: the path of the channel
    served here, told on the answer (`Toolref-Channel`), as on the answer to an offer;
    `version`: of edits, told on it (`Toolref-Edits`); `refused`: told each refusal of the
    registry's that is answered 415, before it is (the middleware asks the registry's
    version again after one it could not read: `toolref.receiving.registry_edits`).
    The restored body is charged to `account`, and refused past `max_restored_bytes`,
    before it is built."""
    try:
        data = await read(receive, max_body_bytes, account)  # this backend's own limits
        reserve = Reserved(account, max_restored_bytes)
        try:
            if held is not None and held.max_bytes:
                base = held.get(base_of(data))
                applied = await registry.apply_edit(data, segments=True, held=base, reserve=reserve)
                held.keep(applied)
            else:
                applied = await registry.apply_edit(data, reserve=reserve)
            restored = restored_scope(scope, applied, account)
        except ToolrefError as exc:
            # resent; or this process's budget full, retried later (the registry's own 503
            # `overloaded` is no more the app's than its outage: a 415, sent as it is)
            if isinstance(exc, RESENT_ON) or exc is reserve.overloaded:
                raise
            if refused is not None:
                await refused(exc)
            await problem(send, unapplied(registry, exc))  # sent as it is instead
            return False
    except Disconnected:
        return True
    except ToolrefError as exc:  # resent on; the budget full (503); the edit over the limit
        if isinstance(exc, BodyTooLargeError):  # the request whole is the app's to take
            await problem(send, unapplied(registry, exc))
            return False
        await problem(send, exc)
        return True
    answered = kept_answer(send, registry, applied.ref, scope["path"])
    marks = marked(answered, applied, len(data), channel, version)
    await answered_always(app, restored, replay(applied.body, receive), marks, problem)
    return True


async def answered_always(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    problem: Callable[[Send, ToolrefError], Awaitable[None]],
) -> None:
    """`app` on a restored request, its exception re-raised (for the server to log), but
    answered here first when the app had not begun its answer: a 500 with the edit's marks
    (`send`), so that the client takes it as this receiver's answer. Unmarked, the server's
    own 500 reads as a receiver that no longer reads edits, and the client sends the request
    again as it is: the app would run twice."""
    started = False

    async def watched(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, receive, watched)
    except Exception:
        if not started:
            failed = ToolrefError(
                "the app failed on this request (an exception it did not handle: see the "
                "server's log); it was not sent again"
            )
            with contextlib.suppress(Exception):  # the client gone: nothing to tell
                await problem(send, failed)
        raise


class Reserved:
    """What a restored body's bytes are told to before it is built: over `limit`,
    `BodyTooLargeError` (the client sends the request whole, for the app's own limits);
    else charged to `account`, whose budget's `OverloadedError` (past the process's budget)
    is kept in `overloaded`: this process's refusal, not the registry's."""

    def __init__(self, account: Account, limit: int) -> None:
        self.account, self.limit = account, limit
        self.overloaded: OverloadedError | None = None

    def __call__(self, size: int) -> None:
        if size > self.limit:
            raise BodyTooLargeError(
                f"the edit restores a body of {size} bytes, over this backend's limit of "
                f"{self.limit} (max_inflated_bytes); send the request whole",
                limit=self.limit,
            )
        try:
            self.account.charge(size)
        except OverloadedError as exc:
            self.overloaded = exc
            raise


async def read(receive: Receive, limit: int, account: Account) -> bytes:
    """The edit's bytes, within `limit`, charged as they come."""
    return await read_body(
        receive, limit, "send fewer segments inline, or the request whole", account
    )


def unapplied(registry: Registry, exc: ToolrefError) -> UnsupportedMediaTypeError:
    """The 415 an edit gets that is not applied here, its client resending on no refusal
    of it (the registry down, refusing this backend, over a quota, busy; the edit over a
    limit, of a version the registry does not read, naming a credential the request lacks):
    the client sends it as it is (and edits again once an answer says `Toolref-Edits`).
    `cause` names the refusal (its problem type); a `too-many-items` one's `limit` with it,
    from which a sender learns the entries the registry takes (`toolref.sending.entries`)."""
    told: dict[str, object] = {"cause": exc.problem_type()}
    if isinstance(exc, TooManyItemsError) and "limit" in exc.extra:
        told["limit"] = exc.extra["limit"]
    return UnsupportedMediaTypeError(
        f"this backend cannot apply this edit ({registry.location}: {exc.detail}); send the "
        f"request as it is (without Content-Type: {wire.MEDIA_TYPE})",
        **told,
    )


def restored_scope(scope: Scope, applied: AppliedEdit, account: Account) -> Scope:
    """The scope the app sees (see the module docstring); `BadRequestError` when segment 0
    names a credential the request does not carry."""
    own = decoded(scope["headers"])
    secrets = [(name, value) for name, value in own if is_secret(name)]
    restored = restore_headers(applied.head, secrets)
    if restored is None:
        raise BadRequestError(
            "the edit's headers name a credential the request does not send as a real header "
            "(toolref.edits.segments.header_segment); send every credential it names"
        )
    merged = merged_headers(restored, own)
    merged.append(("content-length", str(len(applied.body))))
    return {**scope, "headers": encoded(merged), SCOPE_KEY: account}


def merged_headers(
    restored: Sequence[tuple[str, str]], own: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The app's headers: segment 0's (`restored`, credentials filled), but none that
    describes a hop (`Host`, framing: the request's own are its real ones); a real header
    of the request in place of segment 0's lines of its name (the network's word: a proxy in
    front may set `X-Forwarded-For` or an identity header, which the client must not
    override from inside its body), but for the HTTP stack's own defaults on the edit
    request (`_CLIENT_DEFAULTS`) and credentials, where segment 0's are what the app's SDK
    wrote; then every other real header (what a browser or proxy adds: `cookie`, `origin`),
    but the body's framing and toolref's. Linear in the headers."""
    kept = [(name, value) for name, value in restored if not describes_hop(name.lower())]
    named = {name.lower() for name, _ in kept}
    instead: dict[str, list[tuple[str, str]]] = {}
    added: list[tuple[str, str]] = []
    for name, value in own:
        low = name.lower()
        if low in _FRAMING or low.startswith(TOOLREF_PREFIX):
            continue
        if low not in named:
            added.append((name, value))
        elif not is_secret(low) and low not in _CLIENT_DEFAULTS:
            instead.setdefault(low, []).append((name, value))
    if not instead:
        return [*kept, *added]
    merged: list[tuple[str, str]] = []
    for name, value in kept:
        low = name.lower()
        if low not in instead:
            merged.append((name, value))
        elif instead[low]:  # at its first line; its other lines gone
            merged += instead[low]
            instead[low] = []
    return [*merged, *added]


def marked(send: Send, applied: AppliedEdit, sent: int, channel: str | None, version: int) -> Send:
    """`send`, adding to the answer's head the recipe kept, that edits (of `version`) are
    read here (and where the channel is, when one is served: `channel`) and the bytes
    saved."""
    told: Sequence[tuple[bytes, bytes]] = (
        (asgi_name(HISTORY_HEADER), applied.ref.encode("ascii")),
        (asgi_name(EDITS_HEADER), b"%d" % version),
        *(() if channel is None else ((asgi_name(CHANNEL_HEADER), _quoted(channel)),)),
        (asgi_name(SAVINGS_HEADER), savings_value(len(applied.body), sent).encode()),
    )
    return with_headers(send, told)


def kept_answer(send: Send, registry: Registry, ref: str, path: str) -> Send:
    """`send`, reading the app's streamed answer as it passes (`toolref.edits.answer.tap_for`):
    once whole, kept by the registry as recipe `ref`'s (`Registry.keep_answer`) right after
    the piece that ends it is sent on (the request's one registry round trip on the client's
    clock is the edit's; the answer's comes after the client has it all, and before the
    client's next edit, which compresses the model's segments against it, can reach the
    registry: that edit is read, restored and sent by the client after this one's end was
    sent, while this round trip was already under way). A registry that cannot keep it is
    logged: the next edit is refused 400 and sent again without. O(stream)."""
    tap: AnswerTap | None = None

    async def tapped(message: Message) -> None:
        nonlocal tap
        answer: bytes | None = None
        if message["type"] == "http.response.start":
            headers = decoded(message.get("headers", []))
            tap = tap_for(path, message["status"], headers)
        elif tap is not None and tap.feed(message.get("body", b"")):
            answer, tap = tap.answer, None
        await send(message)
        if answer is not None:
            try:
                await registry.keep_answer(ref, answer)
            except ToolrefError as exc:
                log.warning("the answer of %s not kept: %s", ref, exc.detail)

    return tapped


def offers_edits(scope: Scope) -> bool:
    """The request says its sender sends edits (`Toolref-Edits`): its answer says we read
    them."""
    return header(scope, EDITS_HEADER) is not None


def told_edits(scope: Scope, send: Send, channel: str | None, version: int) -> tuple[Scope, Send]:
    """A request offering edits as the app sees it (the offer is toolref's, not the app's),
    and `send` adding `Toolref-Edits: <version>` to its answer's head (none when `version`
    is below every version of edits: the registry applies none), and `Toolref-Channel` when
    a channel is served (at the path `channel`)."""
    name = asgi_name(EDITS_HEADER)
    kept = [(k, v) for k, v in scope["headers"] if k.lower() != name]
    if version < min(wire.VERSIONS):
        return {**scope, "headers": kept}, send
    told = [(name, b"%d" % version)]
    if channel is not None:
        told.append((asgi_name(CHANNEL_HEADER), _quoted(channel)))
    return {**scope, "headers": kept}, with_headers(send, told)


_EXPOSE: Final = b"access-control-expose-headers"
_ENCODING: Final = b"content-encoding"


def exposing(scope: Scope, send: Send) -> Send:
    """`send`, listing in `Access-Control-Expose-Headers` the toolref headers its answer
    carries (`exposed`) when the request has an `Origin` (a browser page's: on another
    origin, the page reads no answer header its backend does not expose, whatever CORS
    middleware sits outside, one allowing every request header included). Never a CORS
    allow header: whether the origin may read the answer at all is the app's to say."""
    if header(scope, "origin") is None:
        return send

    async def with_exposed(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": exposed(message.get("headers", []))}
        await send(message)

    return with_exposed


def exposed(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` with each toolref header they carry named in `Access-Control-Expose-Headers`:
    appended to the app's own names (its lines joined into one, every name kept), added
    where it has none; as they are when it names them all. A `*` of the app's counts for
    none: it exposes every header only to a request without credentials (the Fetch
    standard; to one with cookies it is a header named `*`), and names beside it are read
    either way. `Content-Encoding` too, when such an answer has one: the page's browser
    decodes the body and, the header hidden, its tap would read a plain stream and make an
    answer this receiver (which taps the encoded bytes) never keeps: each next edit naming
    it refused `dictionary-mismatch` (docs/edits.md, "The answer as dictionary"). Linear in
    the headers."""
    ours: dict[bytes, None] = {}
    theirs: list[bytes] = []
    encoded = False
    for key, value in headers:
        low = key.lower()
        if low == _EXPOSE:
            theirs.append(value.strip())
        elif low.startswith(TOOLREF_PREFIX.encode()):
            ours.setdefault(low)
        encoded = encoded or low == _ENCODING
    if ours and encoded:
        ours.setdefault(_ENCODING)
    named = {item.strip().lower() for line in theirs for item in line.split(b",")}
    missing = [_titled(name) for name in ours if name not in named]
    if not missing:
        return list(headers)
    value = b", ".join([*(line for line in theirs if line), *missing])
    kept = [(key, v) for key, v in headers if key.lower() != _EXPOSE]
    return [*kept, (_EXPOSE, value)]


def _titled(name: bytes) -> bytes:
    """`toolref-edits` as the docs write it, `Toolref-Edits` (the case is the reader's)."""
    return b"-".join(part[:1].upper() + part[1:] for part in name.split(b"-"))


def _quoted(path: str) -> bytes:
    """A channel's path as a header tells it: a URL path (a mount point's spaces and the
    like quoted)."""
    return quote(path, safe=_PATH_SAFE).encode("ascii")
