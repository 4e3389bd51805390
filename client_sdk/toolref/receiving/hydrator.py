"""What a backend does with a protocol-2 request body before its app (or an upstream LLM)
sees it: inflate it, continue the history it names, and hydrate its markers.

The client's body travels to the app as the client wrote it. Its messages go to the
registry as text; the registry answers the whole conversation as text (payloads and history
messages exactly as their clients wrote them), and that text is spliced into the client's
body in place of its own messages. Nothing is parsed and written again on the way, so key
order, number forms (`1.0`, `-0.0`, `1e-7`) and escapes reach the app unchanged.

A backend also keeps the body of the request it confirmed a history for (as sent,
inflated) and says so (`Toolref-Dictionary` in the answer): the client may compress a later
body against the history's dictionary followed by that body (`history.primed`).

The answer then tells the client only what it lacks: with a confirmed history, nothing but
the history's ref (every invocation in it is held, and the client computes their refs
itself); otherwise the refs of the invocations it sent in full.

A backend keeps the histories it confirmed, in full (bounded: `recent_history_chars`, LRU).
When the next turn continues one it holds, it asks the registry for the new messages only
(`returnMessages: "new"`) and hands the app the history it holds joined with them: the
registry never sends it the conversation again, and nothing in it is parsed again. A
history it does not hold (another replica served the last turn) comes whole from the
registry, once.

Used by `ToolRefMiddleware` and by the gateway. Outcomes are frozen dataclasses; errors the
client must see are `ToolrefError`s, raised.

Memory: each step charges what it keeps to the request's
`toolref.receiving.budget.Account` before it
keeps it (the body inflated, a history fetched for its dictionary, what the history adds to
the hydrated body). One hydrated gateway request (inflate, parse, the registry's steps in
process, splice, forward) peaks at about 6.4 times its inflated bytes for a conversation of
many tool results, 9 when one tool result is the whole body (its registration holds a few
copies of it), measured with tracemalloc (tests/adversarial/test_memory_bounds.py holds them
under 7 and 10): the body, its text and parsed members, the registry's registration and
filled texts, the spliced body.
No step copies the conversation only to measure it or to add brackets to it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from toolref import formats, history, spans
from toolref.history import dictionary_header, history_header
from toolref.receiving.budget import Account, charge
from toolref.receiving.metrics import counter
from toolref.receiving.recent import Entry, Recent
from toolref.receiving.workers import Workers
from toolref.registry.client import AsyncRegistryClient
from toolref.registry.port import Hydration, Messages, Registry, registry_port
from toolref.wire import compression
from toolref.wire.encoding import JSON_TYPE
from toolref.wire.errors import (
    AuthenticationError,
    ConflictError,
    DictionaryMismatchError,
    MissingHistoryError,
    MissingRefsError,
    ProtocolRequiredError,
    ServiceUnavailableError,
    ToolrefError,
    UnexpectedResponseError,
    UnsupportedMediaTypeError,
)
from toolref.wire.headers import CHECKPOINT_HEADER, DICTIONARY_HEADER, HISTORY_HEADER
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
    history: str | None  # the history ref confirmed for the whole conversation
    primed: bool = False  # this body is kept with that history, to compress against
    checkpoint: str | None = None  # the checkpoint kept too, when asked


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
    recent_histories: how many confirmed histories to keep, to continue them and rebuild
        their dictionaries without the registry sending them again (in full only when the
        registry does not hold them itself).
    recent_history_chars: at most this many characters of them in all, with the request
        bodies kept to compress against (LRU).
    offload_bytes: bodies (and answers) at least this large are inflated, parsed and spliced
        in a worker thread, so a large one does not hold up the event loop's other requests
        (each step is linear in the body); None: always on the loop.
    workers: the threads to offload to (the service's bounded pool; by default the event
        loop's executor, from `offload_bytes` on).
    memory, scope: where those histories are kept (a `Recent` shared by several hydrators,
        under `scope`: the gateway's, one scope per tenant); a memory of its own when None.
    """

    def __init__(
        self,
        registry: Registry | AsyncRegistryClient,
        *,
        messages_keys: Sequence[str] = ("messages", "input", "contents"),
        format: FormatName | None = None,
        max_inflated_bytes: int = 64 * 2**20,
        recent_histories: int = 32,
        recent_history_chars: int = 64 * 2**20,
        offload_bytes: int | None = None,
        memory: Recent | None = None,
        scope: str = "",
        workers: Workers | None = None,
    ) -> None:
        self.registry = registry_port(registry)
        self.offload_bytes = offload_bytes
        self.workers = workers if workers is not None else Workers(None, offload_bytes)
        self.messages_keys = tuple(messages_keys)
        self.format = format
        self.max_inflated_bytes = max_inflated_bytes
        self.memory = (
            memory if memory is not None else Recent(recent_histories, recent_history_chars)
        )
        self.scope = scope

    # --- the body as sent -------------------------------------------------------------

    async def inflate(
        self,
        body: bytes,
        encoding: str | None,
        history_ref: str | None,
        dictionary_ref: str | None = None,
        account: Account | None = None,
    ) -> bytes:
        """The body as written: gzip or zstd undone (zstd against the primed dictionary of
        the history the `Toolref-Dictionary` header names, or else the dictionary of the
        history the `Toolref-History` header names, if either does), within the limit.
        What it inflates to is charged to `account` before it is kept (a frame that
        declares its size: that size, before any work)."""
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
        _, continues = history_header(history_ref)
        named = dictionary_header(dictionary_ref)
        # The work is sized by what the frame declares it inflates to, not by its bytes.
        if named is not None:
            size = compression.check_frame(body, limit, named)  # before any work
            primed = await self._primed(named, account)
            return await self._work(
                size, compression.decompress, body, primed, limit, named, account
            )
        if continues is None:
            # Frames after the first may say nothing of their size: sized as the limit.
            return await self._work(limit, compression.inflate, body, limit, account)
        size = compression.check_frame(body, limit, continues)  # before any work
        dictionary = await self._dictionary(continues, account)
        return await self._work(
            size, compression.decompress, body, dictionary, limit, continues, account
        )

    async def _dictionary(self, ref: str, account: Account | None = None) -> bytes:
        """The zstd dictionary of history `ref`: built from its messages (held here, or
        asked of the registry), once per history."""
        found = self.memory.get(self.scope, ref)
        if found is not None and found.dictionary is not None:
            return found.dictionary
        if found is not None and found.texts:
            texts: Sequence[str] = found.texts
        else:
            texts = await self._history(ref, account)
        dictionary = history.dictionary_of_texts(texts)
        if found is None:
            kept = () if self.registry.holds_histories else tuple(texts)
            found = Entry.of(kept)
            self.memory.remember(self.scope, ref, found)
        found.dictionary = dictionary
        return dictionary

    async def _history(self, ref: str, account: Account | None) -> Sequence[str]:
        """The messages of history `ref`, asked of the registry (charged to `account`:
        held while its dictionary is built)."""
        try:
            answer = await self.registry.history(ref, self.format)
        except REGISTRY_FAILURES as exc:
            raise _unavailable(ref, exc) from None
        charge(account, answer.size)
        return await self._work(answer.size, answer.split)

    async def _primed(self, ref: str, account: Account | None) -> bytes:
        """`history.primed` for history `ref`, from the body this backend keeps for it (the
        body is held nowhere else: another replica answers 400, and the client asks again
        without it)."""
        found = self.memory.get(self.scope, ref)
        if found is None or found.prior is None:
            raise DictionaryMismatchError(
                f"{DICTIONARY_HEADER}: {ref} names a request body this server does not hold "
                "(another replica confirmed it, or it was evicted); send the body without "
                f"{DICTIONARY_HEADER}"
            )
        # Not kept: a history is continued once, and its successor has a body of its own.
        return history.primed(await self._dictionary(ref, account), found.prior)

    # --- hydration --------------------------------------------------------------------

    async def hydrate(
        self, body: bytes, headers: Mapping[str, str], account: Account | None = None
    ) -> Outcome:
        """The outcome for an inflated protocol-2 body; `headers` by lowercase name. What
        the conversation's history adds to the body (the hydrated body is larger than the
        one sent by the history's text) is charged to `account` before it is spliced: a
        history held here before the registry is called, one it sends back on arrival."""
        read = await self._work(len(body), self._read, body, headers.get("content-type"))
        if read is None:
            return PassThrough(body, PROTOCOL_REFS)
        document, key = read
        keep, continues = history_header(headers.get(HISTORY_HEADER.lower()))
        member = document.members.get("historyRef")
        ref = history.continued_ref(None if member is None else member.value, continues)
        listed = document.members[key]
        text = document.text[listed.start : listed.end]
        items = document.items if len(self.messages_keys) == 1 else None
        messages = Messages(text, document.value[key], document.text, items)
        holds = self.registry.holds_histories
        held = None if holds else self.memory.get(self.scope, ref)
        if held is not None:  # the history held joins the hydrated body: charged first
            charge(account, sum(map(len, held.texts)))
        checkpoint = keep and headers.get(CHECKPOINT_HEADER.lower(), "").strip() == "?1"
        try:
            answer = await self.registry.hydrate(
                messages,
                self.format,
                history_ref=ref,
                keep_history=keep,
                return_messages="new" if held is not None else "all",
                checkpoint=checkpoint,
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
            if ref is not None or _MARKER_REF.search(text):
                raise
            # Something the app alone would have taken (the registry refused the body):
            # the app gets it as sent, and the client sends full payloads.
            return self._without_registry(body, document.value[key], "refused", exc)
        size = answer.size
        new_only = answer.returned == "new" and held is not None
        # A history the registry sent back (none held here) is known only now, after the
        # registry registered the request's tool results (idempotent: a retry finds them).
        charge(account, size - len(text))
        lacking = _lacking(answer, text, keep)
        del text, messages  # held no longer: the answer's texts take their place
        texts = answer.texts if answer.texts is not None else await self._work(size, answer.split)
        confirmed, kept = answer.history_ref, answer.checkpoint
        del answer
        if new_only and held is not None:
            texts = (*held.texts, *texts)
        primed = False
        if confirmed is not None:
            whole = () if holds else tuple(texts)
            self.memory.remember(self.scope, confirmed, Entry.of(whole, body), replaces=ref)
            primed = (self.scope, confirmed) in self.memory
        if confirmed is not None and kept is not None and kept[1] < len(texts):
            before = () if holds else tuple(texts[: kept[1]])
            self.memory.remember(self.scope, kept[0], Entry.of(before, body))
            self.memory.pair(self.scope, confirmed, kept[0])
        return Hydrated(
            await self._work(len(body) + size, _spliced, document, key, texts),
            lacking,
            confirmed,
            primed,
            kept[0] if confirmed is not None and kept is not None else None,
        )

    async def _work(self, size: int, step: Callable[..., T], *args: Any) -> T:
        """`step(*args)`, in a worker thread when its input is `offload_bytes` or more."""
        return await self.workers.run(size, step, *args)

    def _read(self, body: bytes, content_type: str | None) -> tuple[spans.Document, str] | None:
        """The body's JSON document and where its messages are; None when there are no
        messages to hydrate (not JSON, not an object, no list under a messages key)."""
        media = (content_type or "").split(";")[0].strip().lower()
        if media != JSON_TYPE:
            return None
        # With one messages key, the spans of its messages come with the one parse.
        array_key = self.messages_keys[0] if len(self.messages_keys) == 1 else None
        try:
            document = spans.document(body.decode("utf-8"), array_key)
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


def _spliced(document: spans.Document, key: str, messages: Sequence[str]) -> bytes:
    """The client's body with the whole conversation (each message's text) in place of its
    own messages and without `historyRef` (the app never saw one): everything else as the
    client wrote it, byte for byte (whitespace, repeated keys, number spellings; the
    client's own separator between messages). One join of texts held (linear, in C): the
    body's text is built once and encoded once, no piece copied on the way."""
    text = document.text
    array = document.members[key]
    items = document.items
    if items:
        separator = text[items[0][1] : items[1][0]] if len(items) > 1 else ","
        lead, trail = text[array.start + 1 : items[0][0]], text[items[-1][1] : array.end - 1]
    else:
        separator, lead, trail = ",", "", ""
    listed: list[str] = ["[", lead]
    for index, message in enumerate(messages):
        if index:
            listed.append(separator)
        listed.append(message)
    listed += (trail, "]")
    cuts = [(array.start, array.end, listed)]
    history = document.members.get("historyRef")
    if history is not None:
        cuts.append((*_member_span(text, history), []))
    pieces: list[str] = []  # texts held already, joined once (no message copied twice)
    at = 0
    for start, end, replacement in sorted(cuts):
        pieces.append(text[at:start])
        pieces += replacement
        at = end
    pieces.append(text[at:])
    return "".join(pieces).encode()


def _member_span(text: str, member: spans.Member) -> tuple[int, int]:
    """The span to cut to remove `member` and one comma beside it (the one before, unless it
    is the first member): what is left is the same object, as written, without it."""
    before = member.key_start
    while before > 0 and text[before - 1] in " \t\n\r":
        before -= 1
    if text[before - 1 : before] == ",":
        return before - 1, member.end
    after = spans.skip_ws(text, member.end)
    if text[after : after + 1] == ",":
        return member.key_start, spans.skip_ws(text, after + 1)
    return member.key_start, member.end


def _lacking(answer: Hydration, sent: str, asked_history: bool) -> dict[str, str]:
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
