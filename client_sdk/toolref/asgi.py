"""`ToolRefMiddleware`: refs for Python chat backends (Starlette, FastAPI, any ASGI app).

For a client speaking protocol 2 (`Toolref-Protocol: 2`), the middleware hydrates the
`toolRef` markers in the JSON request body through the registry before the app sees it, so
the app only ever sees full messages. It adds `toolReferences` to the app's JSON answer (or,
for other answers such as event streams, a `Toolref-References` header) so the client learns
which payloads it may send as refs next time. An unknown ref is answered with 409 and
`missingRefs`, and the client's SDK resends those payloads in full.

History refs: a client that sends `Toolref-History: ?1` has the conversation kept as a
history in the registry, and the answer confirms its ref in the same header. Next turn the
client sends only the new messages, with `historyRef` (or the ref in the header and a zstd
body compressed against the history); the middleware has the registry rebuild the whole
conversation, and the app sees it in full, without `historyRef`. An unknown history is a 409
`missing-history`, which the SDK answers by resending everything. The middleware keeps the
last histories it confirmed in memory, so that rebuilding a dictionary usually costs no
registry call; any replica can serve any turn, since the registry holds the histories.

A protocol-1 request passes through untouched, and its answer is byte for byte what the app
alone would give. When the registry is down, requests without markers pass through and are
answered as protocol 1 (so clients send full payloads); requests with markers get 409 with
every ref missing, and requests continuing a history a 409 `missing-history`, which the SDK
answers by resending in full. Chatting never stops.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container, MutableMapping, Sequence
from typing import Any

from toolref import compression, formats, history
from toolref.checks import check_middleware_options
from toolref.client import AsyncRegistryClient, MessagesResult
from toolref.encoding import JSON_TYPE, PROBLEM_TYPE, dumps_json
from toolref.errors import (
    AuthenticationError,
    BodyTooLargeError,
    InvalidProtocolError,
    MissingHistoryError,
    MissingRefsError,
    ProtocolRequiredError,
    ServiceUnavailableError,
    ToolrefError,
    UnexpectedResponseError,
    UnsupportedMediaTypeError,
)
from toolref.history import HISTORY_HEADER, history_header
from toolref.models import FormatName
from toolref.protocol import PROTOCOL_FULL, PROTOCOL_HEADER, PROTOCOL_REFS, negotiate
from toolref.rewriter import REFERENCES_HEADER

log = logging.getLogger(__name__)

# The ASGI types, spelled out so the SDK does not depend on Starlette.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# The registry failing us (down, refusing our key, not a registry): not the client's fault.
_REGISTRY_FAILURES = (
    ServiceUnavailableError,
    AuthenticationError,
    ProtocolRequiredError,
    UnexpectedResponseError,
)

_PROTOCOL = PROTOCOL_HEADER.lower().encode()
_HISTORY = HISTORY_HEADER.lower().encode()
_HEADER_LIMIT = 8192  # beyond this, refs are not offered in a header (proxies cut long ones)


class ToolRefMiddleware:
    """Hydrate refs in requests and confirm refs in answers; see the module docstring.

    registry: the `AsyncRegistryClient` to hydrate through (its breaker decides when the
        registry is skipped).
    messages_keys: where the messages may sit in a request body (the first present wins).
    format: the message format (detected per request when None).
    paths: only requests to these paths are handled (all POST/PUT/PATCH when None).
    max_body_bytes: larger protocol-2 bodies (sent or inflated) are refused with 413.
    recent_histories: how many confirmed histories to keep in memory, to rebuild their
        dictionaries without a registry call.
    """

    def __init__(
        self,
        app: ASGIApp,
        registry: AsyncRegistryClient,
        *,
        messages_keys: Sequence[str] = ("messages", "input", "contents"),
        format: FormatName | None = None,
        paths: Container[str] | None = None,
        max_body_bytes: int = 32 * 2**20,
        recent_histories: int = 32,
    ) -> None:
        check_middleware_options(
            registry=registry,
            messages_keys=messages_keys,
            format=format,
            paths=paths,
            max_body_bytes=max_body_bytes,
            recent_histories=recent_histories,
        )
        self.app = app
        self.registry = registry
        self.messages_keys = tuple(messages_keys)
        self.format = format
        self.paths = paths
        self.max_body_bytes = max_body_bytes
        self.recent_histories = recent_histories
        self._recent: OrderedDict[str, list[Any]] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._handles(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
            await self._handle(scope, body, send)
        except ToolrefError as exc:
            await _problem(send, exc, PROTOCOL_REFS)

    def _handles(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return False
        if self.paths is not None and scope["path"] not in self.paths:
            return False
        values = [v.decode("latin-1") for k, v in scope["headers"] if k == _PROTOCOL]
        try:
            return negotiate(",".join(values) if values else None) >= PROTOCOL_REFS
        except InvalidProtocolError:
            return False  # not ours to judge: the app sees the request as it came

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        encoding = (_header(scope, b"content-encoding") or "identity").strip().lower()
        if encoding not in ("identity", "zstd"):
            raise UnsupportedMediaTypeError(
                f"a protocol-2 request body may be sent as is or with Content-Encoding: zstd, "
                f"not {encoding}; send it as plain JSON",
                supported=["identity", "zstd"],
            )
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLargeError(
                    f"the request body is over {self.max_body_bytes} bytes; send fewer messages",
                    limit=self.max_body_bytes,
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if encoding == "identity":
            return body
        _, continues = history_header(_header(scope, _HISTORY))
        if continues is None:
            return compression.inflate(body, self.max_body_bytes)
        compression.check_frame(body, self.max_body_bytes, continues)  # before any work
        dictionary = history.dictionary(await self._history(continues))
        return compression.decompress(body, dictionary, self.max_body_bytes, continues)

    async def _history(self, ref: str) -> list[Any]:
        """The messages of history `ref` in full: from memory, or rebuilt by the registry."""
        found = self._recent.get(ref)
        if found is not None:
            self._recent.move_to_end(ref)
            return found
        try:
            result = await self.registry.hydrate([], format=self.format, history_ref=ref)
        except _REGISTRY_FAILURES as exc:
            raise _unavailable(ref, exc) from None
        self._remember(ref, result.messages)
        return result.messages

    def _remember(self, ref: str, messages: list[Any]) -> None:
        self._recent[ref] = messages
        self._recent.move_to_end(ref)
        while len(self._recent) > self.recent_histories:
            self._recent.popitem(last=False)

    async def _handle(self, scope: Scope, body: bytes, send: Send) -> None:
        data, key = self._messages(scope, body)
        if key is None:
            await self.app(scope, _replay(body), _with_protocol(send, PROTOCOL_REFS, None))
            return
        keep, continues = history_header(_header(scope, _HISTORY))
        ref = history.continued_ref(data.pop("historyRef", None), continues)
        messages = data[key]
        try:
            result = await self.registry.hydrate(
                messages, format=self.format, history_ref=ref, keep_history=keep
            )
        except (MissingRefsError, MissingHistoryError) as exc:
            await _problem(send, exc, PROTOCOL_REFS)
            return
        except _REGISTRY_FAILURES as exc:
            if ref is not None:
                await _problem(send, _unavailable(ref, exc), PROTOCOL_REFS)
                return
            log.warning("registry unavailable, passing full payloads through: %s", exc.detail)
            await self._without_registry(scope, body, messages, send)
            return
        if result.history_ref is not None:
            self._remember(result.history_ref, result.messages)
        hydrated = dumps_json({**data, key: result.messages})
        downstream = _with_length(_without_encoding(scope), len(hydrated))
        await self.app(downstream, _replay(hydrated), _with_protocol(send, PROTOCOL_REFS, result))

    async def _without_registry(
        self, scope: Scope, body: bytes, messages: list[Any], send: Send
    ) -> None:
        fmt = formats.detect(messages, self.format)
        refs = formats.scan(messages, fmt).refs
        if refs:
            await _problem(
                send,
                MissingRefsError(
                    "the registry is unavailable, so no ref can be resolved; resend these "
                    "payloads in full",
                    refs,
                ),
                PROTOCOL_FULL,
            )
            return
        await self.app(scope, _replay(body), _with_protocol(send, PROTOCOL_FULL, None))

    def _messages(self, scope: Scope, body: bytes) -> tuple[dict[str, Any], str | None]:
        media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
        if media != JSON_TYPE:
            return {}, None
        try:
            data = json.loads(body)
        except ValueError:
            return {}, None  # the app answers its own malformed input
        if not isinstance(data, dict):
            return {}, None
        for key in self.messages_keys:
            if isinstance(data.get(key), list):
                return data, key
        return data, None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


def _unavailable(ref: str, exc: ToolrefError) -> MissingHistoryError:
    return MissingHistoryError(
        f"history {ref} cannot be rebuilt now (the registry is unavailable: {exc.detail}); "
        "send the whole conversation",
        ref,
    )


def _without_encoding(scope: Scope) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-encoding"]
    return {**scope, "headers": headers}


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _with_length(scope: Scope, length: int) -> Scope:
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    headers.append((b"content-length", str(length).encode()))
    return {**scope, "headers": headers}


def _with_protocol(send: Send, protocol: int, result: MessagesResult | None) -> Send:
    """Mark the answer with the protocol used and, for protocol 2, the refs it confirms."""
    references = result.tool_references if result is not None else None
    confirmed = result.history_ref if result is not None else None
    start: Message | None = None
    chunks: list[bytes] = []

    async def wrapped(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            headers = [
                (k, v) for k, v in message.get("headers", []) if k not in (_PROTOCOL, _HISTORY)
            ]
            headers.append((_PROTOCOL, str(protocol).encode()))
            if confirmed is not None:
                headers.append((_HISTORY, confirmed.encode()))
            message = {**message, "headers": headers}
            if references and _is_json(headers):
                start = message  # held until the body is complete, to add toolReferences
                return
            if references:
                header = json.dumps(references, separators=(",", ":")).encode()
                if len(header) <= _HEADER_LIMIT:
                    headers.append((REFERENCES_HEADER.lower().encode(), header))
            await send(message)
        elif message["type"] == "http.response.body" and start is not None:
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = _add_references(b"".join(chunks), references or {})
            headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
        else:
            await send(message)

    return wrapped


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    media = b""
    for key, value in headers:
        if key.lower() == b"content-type":
            media = value.split(b";")[0].strip().lower()
        if key.lower() == b"content-encoding" and value.strip().lower() != b"identity":
            return False
    return media == JSON_TYPE.encode()


def _add_references(body: bytes, references: dict[str, str]) -> bytes:
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict):
        return body
    data["toolReferences"] = references
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


async def _problem(send: Send, error: ToolrefError, protocol: int) -> None:
    body = json.dumps(error.to_problem(), separators=(",", ":")).encode()
    headers = [
        (b"content-type", PROBLEM_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        (_PROTOCOL, str(protocol).encode()),
        *((k.lower().encode(), v.encode()) for k, v in error.http_headers().items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
