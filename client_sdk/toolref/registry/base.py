"""`BaseRegistryClient`: every registry operation as a sans-I/O exchange (see `exchange`),
made of the `Session`'s exchanges; `RegistryClient` and `AsyncRegistryClient` only send and
sleep. Arguments are checked when the exchange is made, so a bad one never costs a request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from toolref import formats
from toolref.edits import request as requests
from toolref.edits import wire as edits
from toolref.edits.edit import EditError, apply_segments
from toolref.registry.answers import (
    AppliedEdit,
    HeldRequest,
    HydratedText,
    MessagesResult,
    Reserve,
    Resolved,
)
from toolref.registry.exchange import Exchange
from toolref.registry.options import (
    InvocationLike,
    check_messages_options,
    unique_refs,
    wires,
)
from toolref.registry.session import Session, TransportT_co
from toolref.wire import encoding, endpoints
from toolref.wire.canonical import Ref
from toolref.wire.errors import DecompressedTooLargeError, ToolrefError, UnexpectedResponseError
from toolref.wire.headers import HELD_HEADER, HISTORY_HEADER, PROTOCOL_HEADER
from toolref.wire.models import (
    FindMissingResponse,
    FormatName,
    HydrateMode,
    Invocation,
    MessagesResponse,
    RegisteredRef,
    RegisterResponse,
    ResolveResponse,
)
from toolref.wire.protocol import PROTOCOL_REFS


def _base_of(base: str | None, held: HeldRequest | None) -> Sequence[bytes]:
    """The segments an answer sent as an edit keeps ranges of; `EditError` when it names a
    base this client does not hold."""
    if base is None:
        return ()
    if held is None or held.ref != base:
        raise EditError(f"it keeps {base}, which this client does not hold")
    return held.segments


# The entries an answer sent as an edit may make: kept ranges reference segments already
# held (no copies), so this bounds a list of references, not bytes.
MAX_ENTRIES = 10_000_000
_PROBE_REF = "tr_" + "a" * 26  # a well-formed ref no invocation has: 404 with a good key


class BaseRegistryClient(Session[TransportT_co]):
    """Configuration, negotiation and every exchange; subclasses add the I/O.

    Every option is a keyword argument, checked here, so a misspelt one is a TypeError and a
    value that cannot work a ValueError when the client is made, not at its first request:

    transport: the httpx transport to send through (`RegistryClient`: a sync one such as
        `httpx.HTTPTransport` or `httpx.MockTransport`; `AsyncRegistryClient`: an async one
        such as `httpx.ASGITransport`). None: the network.
    api_key: sent as `Authorization: Bearer <api_key>`; None sends no key.
    timeout: seconds per request. retries, backoff, max_backoff: see `session`.
    breaker: the circuit breaker (a fresh `CircuitBreaker()` when None).
    encoding: `auto` (msgpack when the server offers it), `json` or `msgpack`.
    compress_threshold: zstd request bodies from this many bytes on.
    headers: extra headers on every request. rng: the backoff jitter's random source.
    """

    def _register(self, invocations: Iterable[InvocationLike]) -> Exchange[list[RegisteredRef]]:
        return self._register_batches(wires(invocations))

    def _register_batches(self, items: list[dict[str, Any]]) -> Exchange[list[RegisteredRef]]:
        found: list[RegisteredRef] = []
        for batch in (yield from self._batches(items)):
            body = {"invocations": list(batch)}
            answer = yield from self._call("POST", endpoints.INVOCATIONS, RegisterResponse, body)
            found.extend(answer.refs)
        return found

    def _find_missing(self, refs: Iterable[str]) -> Exchange[list[str]]:
        return self._find_missing_batches(unique_refs(refs))

    def _find_missing_batches(self, wanted: list[str]) -> Exchange[list[str]]:
        missing: list[str] = []
        for batch in (yield from self._batches(wanted)):
            body = {"refs": list(batch)}
            answer = yield from self._call(
                "POST", endpoints.FIND_MISSING, FindMissingResponse, body
            )
            missing.extend(answer.missing)
        return missing

    def _resolve(self, refs: Iterable[str]) -> Exchange[Resolved]:
        return self._resolve_batches(unique_refs(refs))

    def _resolve_batches(self, wanted: list[str]) -> Exchange[Resolved]:
        invocations: dict[str, Invocation] = {}
        missing: list[str] = []
        for batch in (yield from self._batches(wanted)):
            yield from self._resolve_batch(list(batch), invocations, missing)
        return Resolved(invocations, missing)

    def _resolve_batch(
        self, batch: list[str], invocations: dict[str, Invocation], missing: list[str]
    ) -> Exchange[None]:
        """`batch` resolved into `invocations` and `missing`. One whose payloads inflate past
        what the service reads for one request (413 `decompressed-too-large`) is asked again
        in halves: at most twice as many requests as refs, and a failure only for one ref
        alone past the limit."""
        try:
            body = {"refs": batch}
            answer = yield from self._call("POST", endpoints.RESOLVE, ResolveResponse, body)
        except DecompressedTooLargeError:
            if len(batch) < 2:
                raise
            half = len(batch) // 2
            yield from self._resolve_batch(batch[:half], invocations, missing)
            yield from self._resolve_batch(batch[half:], invocations, missing)
            return
        invocations.update(answer.invocations)
        missing.extend(answer.missing)

    def _get(self, ref: str) -> Exchange[Invocation]:
        return self._get_one(Ref(ref))

    def _get_one(self, ref: Ref) -> Exchange[Invocation]:
        path = endpoints.INVOCATION.format(ref=ref)
        return (yield from self._call("GET", path, Invocation, refs=False))

    def _optimize(self, messages: list[Any], format: FormatName | None) -> Exchange[MessagesResult]:
        check_messages_options(messages, format)
        return self._messages(endpoints.OPTIMIZE, {"messages": messages, "format": format})

    def _messages(self, path: str, body: dict[str, Any]) -> Exchange[MessagesResult]:
        """optimize or hydrate: `body` without its None members, the answer read whole."""
        sent = {k: v for k, v in body.items() if v is not None}
        answer = yield from self._call("POST", path, MessagesResponse, sent)
        return MessagesResult.of(answer)

    def _hydrate(
        self, messages: list[Any], format: FormatName | None, mode: HydrateMode | None
    ) -> Exchange[MessagesResult]:
        check_messages_options(messages, format, mode)
        body = {"messages": messages, "format": format, "mode": mode}
        return self._messages(endpoints.HYDRATE, body)

    def _hydrate_text(self, messages: str, format: FormatName | None) -> Exchange[HydratedText]:
        """`_hydrate` for messages given as JSON text (an array), answered as text: nothing
        in them is parsed and written again on the way (see `HydratedText`)."""
        if format is not None:
            formats.check_format(format)
        caps = yield from self._capabilities_exchange()
        self._require_refs()
        options = ""
        if format is not None:
            options += ',"format":' + json.dumps(format)
        headers = {
            **self._headers,
            PROTOCOL_HEADER: str(self.protocol),
            "Accept": encoding.JSON_TYPE,
            "Content-Type": encoding.JSON_TYPE,
        }
        content = ('{"messages":' + messages + options + "}").encode()
        content = self._compressed(caps, content, headers)
        url = self._url(endpoints.HYDRATE)
        request = httpx.Request("POST", url, headers=headers, content=content)
        response = yield from self._send(request)
        media = encoding.media_type(response.headers.get("content-type"))
        if response.status_code >= 400 or media != encoding.JSON_TYPE:
            self._decode(response)  # raises the problem (or says what came instead)
        try:
            return HydratedText.of(response.content.decode())
        except ValueError as exc:
            raise UnexpectedResponseError(
                f"the registry at {self.base_url} answered hydrate with "
                f"{response.content[:120]!r} ({exc}); is it a toolref registry?",
                httpStatus=response.status_code,
            ) from None

    def _apply_edit(
        self,
        data: bytes,
        segments: bool,
        held: HeldRequest | None,
        reserve: Reserve | None = None,
    ) -> Exchange[AppliedEdit]:
        """`POST /v1/edits:apply`: the request edit `data` stands for, its recipe kept (a
        refusal raised as its error: 409 missing-history or missing-pieces, 400, 413).
        `segments`: asked for as an edit, against `held` when that is the edit's base (the
        answer then carries what changed): the request's segments come back too.
        `reserve`: told the body's bytes before it is built (as an edit, before its join)."""
        headers = {**self._headers, "Content-Type": edits.MEDIA_TYPE}
        headers["Accept"] = edits.MEDIA_TYPE if segments else requests.REQUEST_MEDIA_TYPE
        if segments and held is not None:
            headers[HELD_HEADER] = held.ref
        request = httpx.Request(
            "POST", self._url(endpoints.APPLY_EDIT), headers=headers, content=data
        )
        response = yield from self._send(request)
        media = encoding.media_type(response.headers.get("content-type"))
        ref = response.headers.get(HISTORY_HEADER, "").strip()
        if response.status_code == 200 and ref:
            if media == edits.MEDIA_TYPE and segments:
                return self._applied(response.content, ref, held, reserve)
            found = requests.split(response.content)
            if media == requests.REQUEST_MEDIA_TYPE and found is not None:
                if reserve is not None:
                    reserve(len(found[1]))
                return AppliedEdit(found[0], found[1], ref)
        self._decode(response)  # raises the problem (or says what came instead)
        raise self._not_applied(response, "")

    def _keep_answer(self, ref: str, answer: bytes) -> Exchange[None]:
        """`PUT /v1/answers/{recipe}`: the answer recipe `ref`'s request streamed, kept for the
        next edit of it (`toolref.edits.answer`); a refusal raised as its error."""
        headers = {**self._headers, "Content-Type": "application/octet-stream"}
        url = self._url(endpoints.ANSWER.format(recipe=ref))
        response = yield from self._send(httpx.Request("PUT", url, headers=headers, content=answer))
        if response.status_code != 204:
            self._decode(response)  # raises the problem (or says what came instead)

    def _applied(
        self, content: bytes, ref: str, held: HeldRequest | None, reserve: Reserve | None = None
    ) -> AppliedEdit:
        """The request of an answer sent as an edit (of `held`, or of nothing). O(ops +
        inline bytes) and a join of the body, once `reserve` was told its bytes."""
        try:
            header, blob = edits.read(content, len(content), MAX_ENTRIES)
            inline = edits.inline(header, blob, b"", None)
            found = apply_segments(_base_of(header.base, held), header.ops, inline)
        except (EditError, ToolrefError) as exc:
            raise self._not_applied(content, f" ({exc})") from None
        if not found:
            raise self._not_applied(content, " (no segments)")
        if reserve is not None:  # the body's bytes, before they are joined
            reserve(sum(map(len, found)) - len(found[0]))
        return AppliedEdit(found[0], b"".join(found[1:]), ref, found)

    def _not_applied(self, answer: httpx.Response | bytes, why: str) -> UnexpectedResponseError:
        content = answer if isinstance(answer, bytes) else answer.content
        status = 200 if isinstance(answer, bytes) else answer.status_code
        return UnexpectedResponseError(
            f"the registry at {self.base_url} answered {endpoints.APPLY_EDIT} with "
            f"{content[:120]!r}{why}; is it a toolref registry of 0.3 or later?",
            httpStatus=status,
        )

    def _verify(self) -> Exchange[str | None]:
        """None when the registry accepts this client's key; else what is wrong, in words.
        Costs two requests: capabilities (no key needed) and one GET that needs the key."""
        try:
            caps = yield from self._capabilities_exchange()
            if caps.protocol.high < PROTOCOL_REFS:
                return f"the registry at {self.base_url} speaks only protocol {caps.protocol.high}"
            url = self._url(endpoints.INVOCATION.format(ref=_PROBE_REF))
            response = yield from self._send(httpx.Request("GET", url, headers=self._headers))
        except ToolrefError as exc:
            return exc.detail
        if response.status_code in (401, 403):
            return (
                f"the registry at {self.base_url} refused this API key (HTTP "
                f"{response.status_code}); set the key a TOOLREF_API_KEYS entry hashes"
            )
        return None

    def _ready(self) -> Exchange[bool]:
        request = httpx.Request("GET", self._url(endpoints.READYZ), headers=self._headers)
        try:
            response = yield from self._send(request)
        except ToolrefError:
            return False
        return response.status_code == 200
