"""What a backend does with a protocol-2 request body before its app (or an upstream LLM)
sees it: inflate it, and hydrate its `toolRef` markers.

The client's body travels to the app as the client wrote it. Its messages go to the
registry as text; the registry answers them hydrated, as text (payloads exactly as their
clients wrote them), and that text is spliced into the client's body in place of its own
messages. Nothing is parsed and written again on the way, so key order, number forms
(`1.0`, `-0.0`, `1e-7`) and escapes reach the app unchanged. The answer then tells the
client the refs of the invocations it sent in full.

The older history refs (`Toolref-History: ?1` or `th_...`, a `historyRef` member,
`Toolref-Dictionary`, `Toolref-Checkpoint`) were retired in 0.3 (edits replace them): a
request that still uses them is refused (400 `history-refs-retired`) naming the upgrade.

Used by `ToolRefMiddleware` and by the gateway. Outcomes are frozen dataclasses; errors the
client must see are `ToolrefError`s, raised.

Memory: each step charges what it keeps to the request's
`toolref.asgi.budget.Account` before it keeps it (the body inflated, what hydration
adds). One hydrated gateway request (inflate, parse, the registry's steps in process,
splice, forward) peaks at about 6.4 times its inflated bytes for a conversation of many tool
results, 9 when one tool result is the whole body (its registration holds a few copies of
it), measured with tracemalloc (tests/adversarial/test_memory_bounds.py holds them under 7
and 10).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from toolref import formats
from toolref.asgi.budget import Account, charge
from toolref.asgi.workers import Workers
from toolref.kit import spans
from toolref.kit.process_counters import counter
from toolref.registry.client import AsyncRegistryClient
from toolref.registry.port import Hydration, Messages, Registry, registry_port
from toolref.wire import compression
from toolref.wire.encoding import JSON_TYPE, media_type
from toolref.wire.errors import (
    AuthenticationError,
    ConflictError,
    HistoryRefsRetiredError,
    MissingRefsError,
    ProtocolRequiredError,
    ServiceUnavailableError,
    ToolrefError,
    UnexpectedResponseError,
    UnsupportedMediaTypeError,
)
from toolref.wire.headers import RETIRED_HEADERS
from toolref.wire.models import FormatName
from toolref.wire.protocol import PROTOCOL_FULL, PROTOCOL_REFS

log = logging.getLogger(__name__)
T = TypeVar("T")

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


@dataclass(frozen=True, slots=True)
class PassThrough:
    """The body as the client sent it (inflated). `protocol` 2: nothing to hydrate; 1: the
    registry could not be used (`reason`), so the client is told to send full payloads."""

    body: bytes
    protocol: int
    reason: str | None = None


Outcome = Hydrated | PassThrough


class Hydrator:
    """See the module docstring.

    registry: the `Registry` to hydrate through (`toolref.registry.port`), or an
        `AsyncRegistryClient` (its breaker decides when the registry is skipped).
    messages_keys: where the messages may sit in a body (the first present as a list wins).
    format: the message format (detected per request when None).
    max_inflated_bytes: a compressed body may inflate to at most this many bytes.
    offload_bytes: bodies (and answers) at least this large are inflated, parsed and spliced
        in a worker thread, so a large one does not hold up the event loop's other requests
        (each step is linear in the body); None: always on the loop.
    workers: the threads to offload to (the service's bounded pool; by default the event
        loop's executor, from `offload_bytes` on).
    """

    def __init__(
        self,
        registry: Registry | AsyncRegistryClient,
        *,
        messages_keys: Sequence[str] = ("messages", "input", "contents"),
        format: FormatName | None = None,
        max_inflated_bytes: int = 64 * 2**20,
        offload_bytes: int | None = None,
        workers: Workers | None = None,
    ) -> None:
        self.registry = registry_port(registry)
        self.offload_bytes = offload_bytes
        self.workers = workers if workers is not None else Workers(None, offload_bytes)
        self.messages_keys = tuple(messages_keys)
        self.format = format
        self.max_inflated_bytes = max_inflated_bytes

    # --- the body as sent -------------------------------------------------------------

    async def inflate(
        self, body: bytes, encoding: str | None, account: Account | None = None
    ) -> bytes:
        """The body as written: gzip or zstd undone, within the limit. What it inflates to
        is charged to `account` before it is kept."""
        name = (encoding or "identity").strip().lower()
        limit = self.max_inflated_bytes
        if name == "identity":
            return body
        if name == "gzip":
            # Deflate shrinks at most about 1032:1: the work is sized by what it may become.
            size = min(limit, len(body) * 1032)
            return await self._work(size, compression.inflate_gzip, body, limit, account)
        if name != "zstd":
            raise UnsupportedMediaTypeError(
                f"a protocol-2 request body may be sent as is, gzip or zstd, not {name!r}; "
                "send it as plain JSON",
                supported=list(ENCODINGS),
            )
        # Frames may say nothing of their size: the work is sized as the limit.
        return await self._work(limit, compression.inflate, body, limit, account)

    # --- hydration --------------------------------------------------------------------

    async def hydrate(
        self, body: bytes, headers: Mapping[str, str], account: Account | None = None
    ) -> Outcome:
        """The outcome for an inflated protocol-2 body; `headers` by lowercase name. What
        hydration adds to the body is charged to `account` before it is spliced."""
        retired(headers)
        read = await self._work(len(body), self._read, body, headers.get("content-type"))
        if read is None:
            return PassThrough(body, PROTOCOL_REFS)
        document, key, items = read
        if "historyRef" in document.members:
            raise HistoryRefsRetiredError(
                "the body names a `historyRef`: history refs were retired in toolref 0.3, "
                "which sends each request as an edit; upgrade the client's toolref SDK, or "
                "send the whole conversation without it"
            )
        listed = document.members[key]
        text = document.text[listed.start : listed.end]
        messages = Messages(text, document.value[key], document.text, items)
        try:
            answer = await self.registry.hydrate(messages, self.format)
        except MissingRefsError:
            raise
        except REGISTRY_FAILURES as exc:
            return self._without_registry(body, document.value[key], _reason(exc), exc)
        except ConflictError:
            raise
        except ToolrefError as exc:
            if _MARKER_REF.search(text):
                raise
            # Something the app alone would have taken (the registry refused the body):
            # the app gets it as sent, and the client sends full payloads.
            return self._without_registry(body, document.value[key], "refused", exc)
        size = answer.size
        charge(account, size - len(text))
        lacking = _lacking(answer, text)
        del text, messages  # held no longer: the answer's texts take their place
        texts = answer.texts if answer.texts is not None else await self._work(size, answer.split)
        del answer
        spliced = await self._work(len(body) + size, _spliced, document, key, items, texts)
        return Hydrated(spliced, lacking)

    async def _work(self, size: int, step: Callable[..., T], *args: Any) -> T:
        """`step(*args)`, in a worker thread when its input is `offload_bytes` or more."""
        return await self.workers.run(size, step, *args)

    def _read(
        self, body: bytes, content_type: str | None
    ) -> tuple[spans.Document, str, list[tuple[int, int]]] | None:
        """The body's JSON document, where its messages are and the span of each; None
        when there are no messages to hydrate (not JSON, not an object, no list under a
        messages key)."""
        media = media_type(content_type)
        if media != JSON_TYPE:
            return None
        # The spans of the messages under the first key come with the one parse; those
        # under another key (the first present as a list wins) are walked once more.
        try:
            document = spans.document(body.decode("utf-8"), self.messages_keys[0])
        except (ValueError, RecursionError):
            return None  # the app answers its own malformed input
        if not isinstance(document.value, dict):
            return None
        for key in self.messages_keys:
            if isinstance(document.value.get(key), list):
                items = document.items
                if key != self.messages_keys[0] or items is None:
                    listed, _ = spans.elements(document.text, document.members[key].start)
                    items = [(start, end) for _, start, end in listed]
                return document, key, items
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


def _spliced(
    document: spans.Document,
    key: str,
    items: Sequence[tuple[int, int]],
    messages: Sequence[str],
) -> bytes:
    """The client's body with its messages hydrated (each message's text, one for each of
    the spans `items`) in place of its own: everything else as the client wrote it, byte for
    byte (whitespace, repeated keys, number spellings; the client's own separator between
    each two messages). One join of texts held (linear, in C): the body's text is built
    once and encoded once, no piece copied on the way."""
    text = document.text
    array = document.members[key]
    if len(items) != len(messages):
        raise UnexpectedResponseError(
            f"the registry answered {len(messages)} messages hydrated for the {len(items)} "
            "sent; is it a toolref registry?"
        )
    if items:
        lead, trail = text[array.start + 1 : items[0][0]], text[items[-1][1] : array.end - 1]
    else:
        lead = trail = text[array.start + 1 : array.end - 1]  # `[ ]`: what lies between
    listed: list[str] = ["[", lead]
    for index, message in enumerate(messages):
        if index:
            listed.append(text[items[index - 1][1] : items[index][0]])
        listed.append(message)
    if items:
        listed.append(trail)
    listed.append("]")
    # texts held already, joined once (no message copied twice)
    return "".join([text[: array.start], *listed, text[array.end :]]).encode()


def _lacking(answer: Hydration, sent: str) -> dict[str, str]:
    """The refs the client has not been told: those of the invocations it sent in full (it
    sent markers for the others)."""
    known = set(_MARKER_REF.findall(sent))
    return {key: ref for key, ref in answer.tool_references.items() if ref not in known}


def retired(headers: Mapping[str, str]) -> None:
    """`HistoryRefsRetiredError` for a request naming one of the history-ref headers
    retired in 0.3 (`headers` by lowercase name)."""
    for name in RETIRED_HEADERS:
        if name.lower() in headers:
            raise HistoryRefsRetiredError(
                f"the request sends {name}: history refs were retired in toolref 0.3, which "
                "sends each request as an edit; upgrade the client's toolref SDK, or send "
                f"the whole conversation without {name}"
            )
