"""The stored history a hydrate continues, two ways.

- **Tail**: from its node alone (one GET), when the node keeps its head and where format
  detection and pairing stand (`histories.Node`), the history has no call waiting for a
  result, and its messages and tool refs were extended less than
  `history_refresh_seconds` ago. Only the request's messages are then read, scanned,
  filled and chained: the turn costs time in the new messages.
- **Whole**: the node, every message and every tool ref it names, read in one batched
  round trip each and checked; this also extends all their lifetimes (a refresh). Used
  for older nodes, a due refresh, summary mode, a dictionary to rebuild, or any tail the
  node cannot vouch for.

A history is usable only whole. When a tool ref inside it has expired or been evicted the
client cannot resend just that payload (it sent a history ref, not the messages), so that
is answered as a missing history: the SDK then resends the whole conversation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from toolref import formats, history
from toolref.formats import Detection, Format, Scan, source
from toolref.wire.canonical import canonical_json
from toolref.wire.errors import MissingHistoryError, ToolrefError
from toolref.wire.models import FormatName
from toolref_server import documents
from toolref_server.registry.conversation import (
    Conversation,
    check_length,
    held_records,
    messages_of,
)
from toolref_server.services import Services
from toolref_server.storage.histories import Node, message_id
from toolref_server.storage.history_cache import Hydrated
from toolref_server.storage.record import Record

clock = time.time  # read once per continuation; tests move it on


@dataclass(frozen=True, slots=True)
class Continuation:
    """A history read whole."""

    ref: str
    node: Node
    fmt: Format
    form: list[Any]  # chain form, as stored
    texts: list[str]  # the same as its client wrote it
    encoded: list[bytes]  # the same as canonical JSON
    scan: Scan
    held: dict[str, Record]  # the record of every ref its markers name

    @property
    def size(self) -> int:
        return sum(map(len, self.texts))

    def full_texts(self) -> list[str]:
        """The history in full, as the client holds it."""
        payloads = {ref: record.payload for ref, record in self.held.items()}
        return source.fill(self.texts, self.scan, payloads)

    def dictionary(self) -> bytes:
        """The zstd dictionary of the history: its messages in full, as written."""
        return history.dictionary_of_texts(self.full_texts())


@dataclass(frozen=True, slots=True)
class Tail:
    """A history known by its node; `hydrated`: its messages in full, when this process
    holds them (needed only for an answer holding the whole conversation)."""

    ref: str
    node: Node
    hydrated: Hydrated | None


def lost_ref(ref: str, lost: str) -> MissingHistoryError:
    """History `ref` names tool ref `lost`, which the store no longer holds."""
    return MissingHistoryError(
        f"history {ref} names tool ref {lost}, which is no longer held (expired or "
        "evicted); send the whole conversation without the history",
        ref,
    )


def _missing(ref: str) -> MissingHistoryError:
    return MissingHistoryError(
        f"history {ref} is not held (never confirmed for this API key, expired or "
        "evicted); send the whole conversation without it",
        ref,
    )


async def tail(services: Services, tenant: str, ref: str, new_only: bool) -> Tail | None:
    """History `ref` by its node, when the tail path may take it (see the module
    docstring); None sends the request the whole way (which answers a missing history)."""
    node = await services.histories.node(tenant, ref)
    if node is None or not node.continued(ref) or node.pending != 0:
        return None
    if clock() - node.refreshed >= services.settings.history_refresh_seconds:
        return None
    hydrated = services.history_cache.get(tenant, ref)
    if hydrated is None and not new_only:
        return None
    return Tail(ref, node, hydrated)


def tail_conversation(
    limit: int, decoded: documents.Decoded, named: FormatName | None, before: Tail
) -> Conversation | None:
    """The request's messages as the continuation of `before`: format detection goes on
    from where the node left it, and pairing stays within them. None when the node cannot
    vouch for them (a result whose call is not among them, a format the history does not
    fit): the whole path then decides, with its own errors."""
    messages, texts = messages_of(decoded)
    note = f" (history {before.ref} has {before.node.count})"
    check_length(limit, before.node.count + len(messages), note)
    assert before.node.detection is not None
    try:
        detection = formats.detection(messages, None, before.node.detection)  # kept unnamed
        if named is not None and not detection.fits(named):
            return None  # the whole path says which message does not fit
        fmt = formats.get(named) if named is not None else detection.best()
        scan = formats.scan(messages, fmt)
    except ToolrefError:
        return None
    if any(pair.call is None for pair in scan.pairs):
        return None
    return Conversation(fmt, messages, texts, scan, detection)


async def load(services: Services, tenant: str, ref: str) -> Continuation:
    """History `ref` read whole, every lifetime in it extended; 409 when any part of it
    is gone."""
    try:
        return await _load(services, tenant, ref)
    except MissingHistoryError:
        services.metrics.histories.labels(outcome="missing").inc()
        raise


async def _load(services: Services, tenant: str, ref: str) -> Continuation:
    histories = services.histories
    node = await histories.read_node(tenant, ref)
    stored = None if node is None else await histories.load(tenant, ref, node)
    if node is None or stored is None or not formats.is_format_name(stored.format):
        raise _missing(ref)
    fmt = formats.get(stored.format)
    scan = formats.scan(stored.form, fmt)
    found, missing = await held_records(services, tenant, scan.refs)
    if missing:
        raise lost_ref(ref, missing[0])
    return Continuation(ref, node, fmt, stored.form, stored.texts, stored.encoded, scan, found)


def whole_conversation(
    limit: int, decoded: documents.Decoded, named: FormatName | None, before: Continuation
) -> Conversation:
    """The history followed by the new messages, read as one conversation: its format is
    detected over the whole (a history of plain text fits every format, so the one stored
    with it is not binding), and the limit on messages applies to the whole."""
    messages, texts = messages_of(decoded)
    whole = [*before.form, *messages]
    check_length(limit, len(whole), f" (history {before.ref} has {len(before.form)})")
    fmt = formats.detect(whole, named)
    start = before.node.detection
    if start is not None and start.count == len(before.form):
        detection = formats.detection(messages, None, start)
    else:
        detection = formats.detection(whole)
    return Conversation(fmt, whole, [*before.texts, *texts], formats.scan(whole, fmt), detection)


@dataclass(frozen=True, slots=True)
class Chained:
    """A conversation in chain form, ready to keep: as written, as canonical JSON (from
    `start` on: the messages before it are stored already), and the node's state."""

    texts: list[str]
    encoded: list[bytes]
    start: int
    detection: Detection
    pending: int


def chained(
    conversation: Conversation, refs: dict[str, str], before: Continuation | None
) -> Chained:
    """The conversation in chain form; messages it shares with a history read whole reuse
    that history's encoding."""
    form = formats.replace(conversation.messages, conversation.scan, refs)
    texts, _ = source.replace(conversation.texts, conversation.scan, refs)
    start = 0
    if before is not None:
        while start < len(before.form) and form[start] is before.form[start]:
            start += 1
    encoded = [*before.encoded[:start]] if before is not None else []
    encoded.extend(canonical_json(message) for message in form[start:])
    pending = sum(1 for p in conversation.scan.pairs if p.call is not None and p.result is None)
    return Chained(texts, encoded, start, conversation.detection, pending)


def checkpoint_length(conversation: Conversation) -> int:
    """The longest prefix of `conversation` that ends before its last message and leaves
    no call waiting for a result (counted in its messages, from 1); 0 when there is none.
    A client that changes its last message every turn (Claude Code moves its cache mark)
    continues this prefix next turn, and the tail path takes it: nothing in it waits for
    a result in the messages after it. Linear in the messages and their calls."""
    count = len(conversation.messages)
    open_at = [0] * (count + 1)  # calls waiting from each message's end on
    for pair in conversation.scan.pairs:
        if pair.call is None or pair.call.message < 0:
            continue
        until = pair.result.message if pair.result is not None else count
        if until > pair.call.message:
            open_at[pair.call.message + 1] += 1
            open_at[min(until, count - 1) + 1] -= 1
    waiting, best = 0, 0
    for length in range(1, count):
        waiting += open_at[length]
        if waiting == 0:
            best = length
    return best


def checkpoint_node(
    conversation: Conversation, chained: Chained, before: Node | None, now: int
) -> Node | None:
    """The node of `conversation`'s checkpoint (`checkpoint_length`), when it falls
    within the messages worked on: after the node `before` (the tail path: the messages
    are only the new ones), or anywhere (the whole conversation). Its messages are those
    the history stores already; its state is computed as a continuation's would be."""
    length = checkpoint_length(conversation)
    if length == 0:
        return None
    messages = conversation.messages[:length]
    ids = [message_id(text) for text in chained.texts[:length]]
    if before is None:
        head = history.chain(chained.encoded[:length])[-1]
        return Node(conversation.fmt.name, ids, head, now, formats.detection(messages), pending=0)
    if before.head is None or before.detection is None:
        return None
    head = history.chain(chained.encoded[:length], before.head)[-1]
    detection = formats.detection(messages, None, before.detection)
    fmt = conversation.fmt.name
    return Node(fmt, [*before.ids, *ids], head, before.refreshed, detection, 0)
