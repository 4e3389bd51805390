"""What a backend does with a protocol-2 request body before its app (or an upstream LLM)
sees it: inflate it, continue the history it names, and hydrate its markers.

The client's body travels to the app as the client wrote it. Its messages go to the
registry as text; the registry answers the whole conversation as text (payloads and history
messages exactly as their clients wrote them), and that text is spliced into the client's
body in place of its own messages. Nothing is parsed and written again on the way, so key
order, number forms (`1.0`, `-0.0`, `1e-7`) and escapes reach the app unchanged.

The answer then tells the client only what it lacks: with a confirmed history, nothing but
the history's ref (every invocation in it is held, and the client computes their refs
itself); otherwise the refs of the invocations it sent in full.

Used by `ToolRefMiddleware` and by the gateway. Outcomes are frozen dataclasses; errors the
client must see are `ToolrefError`s, raised.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from toolref import compression, formats, history, spans
from toolref.client import AsyncRegistryClient, HydratedText
from toolref.encoding import JSON_TYPE
from toolref.errors import (
    AuthenticationError,
    ConflictError,
    MissingHistoryError,
    MissingRefsError,
    ProtocolRequiredError,
    ServiceUnavailableError,
    ToolrefError,
    UnexpectedResponseError,
    UnsupportedMediaTypeError,
)
from toolref.history import HISTORY_HEADER, history_header
from toolref.metrics import counter
from toolref.models import FormatName
from toolref.protocol import PROTOCOL_FULL, PROTOCOL_REFS

log = logging.getLogger(__name__)

# The registry failing us (down, refusing our key, not a registry): not the client's fault.
REGISTRY_FAILURES: Final = (
    ServiceUnavailableError,
    AuthenticationError,
    ProtocolRequiredError,
    UnexpectedResponseError,
)
ENCODINGS: Final = ("identity", "gzip", "zstd")
# A marker's ref as any JSON writer puts it (markers are found without parsing again).
_MARKER_REF: Final = re.compile(r'"toolRef"\s*:\s*"(tr_[a-z2-7]{26})"')

fallbacks = counter(
    "toolref_middleware_fallbacks_total",
    "Requests a backend passed to its app without the registry (protocol 1), by reason",
    "reason",
)


@dataclass(frozen=True, slots=True)
class Hydrated:
    """The body for the app, whole; what to tell the client."""

    body: bytes
    references: dict[str, str]  # call id -> ref, only refs the client has not been told
    history: str | None  # the history ref confirmed for the whole conversation


@dataclass(frozen=True, slots=True)
class PassThrough:
    """The body as the client sent it (inflated). `protocol` 2: nothing to hydrate; 1: the
    registry could not be used (`reason`), so the client is told to send full payloads."""

    body: bytes
    protocol: int
    reason: str | None = None


Outcome = Hydrated | PassThrough


@dataclass(slots=True)
class _Recent:
    """A history this backend saw confirmed: its messages in full, as text, and the zstd
    dictionary built from them once it is first needed."""

    messages: str
    dictionary: bytes | None = None


class Hydrator:
    """See the module docstring.

    registry: the `AsyncRegistryClient` to hydrate through (its breaker decides when the
        registry is skipped).
    messages_keys: where the messages may sit in a body (the first present as a list wins).
    format: the message format (detected per request when None).
    max_inflated_bytes: a compressed body may inflate to at most this many bytes.
    recent_histories: how many confirmed histories to keep, to rebuild their dictionaries
        without a registry call.
    """

    def __init__(
        self,
        registry: AsyncRegistryClient,
        *,
        messages_keys: Sequence[str] = ("messages", "input", "contents"),
        format: FormatName | None = None,
        max_inflated_bytes: int = 64 * 2**20,
        recent_histories: int = 32,
    ) -> None:
        self.registry = registry
        self.messages_keys = tuple(messages_keys)
        self.format = format
        self.max_inflated_bytes = max_inflated_bytes
        self.recent_histories = recent_histories
        self._recent: OrderedDict[str, _Recent] = OrderedDict()

    # --- the body as sent -------------------------------------------------------------

    async def inflate(self, body: bytes, encoding: str | None, history_ref: str | None) -> bytes:
        """The body as written: gzip or zstd undone (zstd against the dictionary of the
        history the `Toolref-History` header names, if it names one), within the limit."""
        name = (encoding or "identity").strip().lower()
        limit = self.max_inflated_bytes
        if name == "identity":
            return body
        if name == "gzip":
            return compression.inflate_gzip(body, limit)
        if name != "zstd":
            raise UnsupportedMediaTypeError(
                f"a protocol-2 request body may be sent as is, gzip or zstd, not {name!r}; "
                "send it as plain JSON",
                supported=list(ENCODINGS),
            )
        _, continues = history_header(history_ref)
        if continues is None:
            return compression.inflate(body, limit)
        compression.check_frame(body, limit, continues)  # before any work
        dictionary = await self._dictionary(continues)
        return compression.decompress(body, dictionary, limit, continues)

    async def _dictionary(self, ref: str) -> bytes:
        found = self._recent.get(ref)
        if found is None:
            try:
                answer = await self.registry.hydrate_text(
                    "[]", self.format, history_ref=ref, keep_history=False
                )
            except REGISTRY_FAILURES as exc:
                raise _unavailable(ref, exc) from None
            found = self._remember(ref, answer.messages_text)
        else:
            self._recent.move_to_end(ref)
        if found.dictionary is None:
            items, _ = spans.elements(found.messages, 0)
            text = found.messages
            found.dictionary = history.dictionary_of(
                (text[start:end].encode() for _, start, end in reversed(items)), reverse=True
            )
        return found.dictionary

    def _remember(self, ref: str, messages: str) -> _Recent:
        found = self._recent[ref] = _Recent(messages)
        self._recent.move_to_end(ref)
        while len(self._recent) > self.recent_histories:
            self._recent.popitem(last=False)
        return found

    # --- hydration --------------------------------------------------------------------

    async def hydrate(self, body: bytes, headers: Mapping[str, str]) -> Outcome:
        """The outcome for an inflated protocol-2 body; `headers` by lowercase name."""
        read = self._read(body, headers.get("content-type"))
        if read is None:
            return PassThrough(body, PROTOCOL_REFS)
        document, key = read
        keep, continues = history_header(headers.get(HISTORY_HEADER.lower()))
        member = document.members.get("historyRef")
        ref = history.continued_ref(None if member is None else member.value, continues)
        listed = document.members[key]
        messages = document.text[listed.start : listed.end]
        try:
            answer = await self.registry.hydrate_text(
                messages, self.format, history_ref=ref, keep_history=keep
            )
        except (MissingRefsError, MissingHistoryError):
            raise
        except REGISTRY_FAILURES as exc:
            if ref is not None:
                raise _unavailable(ref, exc) from None
            return self._without_registry(body, document.value[key], _reason(exc), exc)
        except ConflictError:
            raise
        except ToolrefError as exc:
            if ref is not None or _MARKER_REF.search(messages):
                raise
            # Something the app alone would have taken (the registry refused the body):
            # the app gets it as sent, and the client sends full payloads.
            return self._without_registry(body, document.value[key], "refused", exc)
        if answer.history_ref is not None:
            self._remember(answer.history_ref, answer.messages_text)
        return Hydrated(
            _spliced(document, key, answer),
            _lacking(answer, messages, keep),
            answer.history_ref,
        )

    def _read(self, body: bytes, content_type: str | None) -> tuple[spans.Document, str] | None:
        """The body's JSON document and where its messages are; None when there are no
        messages to hydrate (not JSON, not an object, no list under a messages key)."""
        media = (content_type or "").split(";")[0].strip().lower()
        if media != JSON_TYPE:
            return None
        try:
            document = spans.document(body.decode("utf-8"))
        except (ValueError, RecursionError):
            return None  # the app answers its own malformed input
        if not isinstance(document.value, dict):
            return None
        for key in self.messages_keys:
            if isinstance(document.value.get(key), list):
                return document, key
        return None

    def _without_registry(
        self, body: bytes, messages: list[Any], reason: str, exc: ToolrefError
    ) -> PassThrough:
        """Full payloads pass through as protocol 1; markers cannot, and are all missing."""
        fallbacks.inc(reason)
        log.debug("registry skipped (%s): %s", reason, exc.detail)
        try:
            fmt = formats.detect(messages, self.format)
            refs = formats.scan(messages, fmt).refs
        except ToolrefError:
            refs = []
        if refs:
            raise MissingRefsError(
                "the registry is unavailable, so no ref can be resolved; resend these "
                "payloads in full",
                refs,
            )
        return PassThrough(body, PROTOCOL_FULL, reason)


def _reason(exc: ToolrefError) -> str:
    if isinstance(exc, AuthenticationError):
        return "unauthorized"
    if isinstance(exc, ServiceUnavailableError):
        return "unavailable"
    return "not-a-registry"


def _spliced(document: spans.Document, key: str, answer: HydratedText) -> bytes:
    """The client's body with the registry's messages in place of its own and without
    `historyRef` (the app never saw one): every other member as the client wrote it."""
    text = document.text
    parts = []
    for name, member in document.members.items():
        if name == "historyRef":
            continue
        if name == key:
            parts.append(text[member.key_start : member.key_end] + ":" + answer.messages_text)
        else:
            parts.append(spans.member_text(text, member))
    return ("{" + ",".join(parts) + "}").encode()


def _lacking(answer: HydratedText, sent: str, asked_history: bool) -> dict[str, str]:
    """The refs the client has not been told: none when its history was confirmed (every
    invocation in it is held, and the client computes refs itself), else those of the
    invocations it sent in full (it sent markers for the others)."""
    if asked_history and answer.history_ref is not None:
        return {}
    known = set(_MARKER_REF.findall(sent))
    return {key: ref for key, ref in answer.tool_references.items() if ref not in known}


def _unavailable(ref: str, exc: ToolrefError) -> MissingHistoryError:
    return MissingHistoryError(
        f"history {ref} cannot be rebuilt now (the registry is unavailable: {exc.detail}); "
        "send the whole conversation",
        ref,
    )
