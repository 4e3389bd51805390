"""Conversations as the registry works on them: read from a decoded body (format detected,
invocations paired), registered (each complete invocation kept as a record), and the
records of the refs its markers name, fetched (409 `missing-refs` for any not held).

Each message travels as the text its sender wrote: payloads are cut from that text and
markers filled back into it (`toolref.formats.source`), so everything else in a message,
and every payload, reaches the receiver byte for byte (key order, `1.0`, `-0.0`). The values
parsed with the text decide what to do: format, pairing, refs. Everything is checked before
anything is stored: the format, the markers, and (hydrate) that every ref is held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolref import formats
from toolref.asgi.workers import Workers
from toolref.formats import Detection, Format, Scan, source
from toolref.wire.canonical import Ref, invocation_digest
from toolref.wire.encoding import dumps_json
from toolref.wire.errors import BatchTooLargeError, MissingRefsError, ValidationError
from toolref.wire.models import FormatName
from toolref_server import documents
from toolref_server.settings import Settings
from toolref_server.storage import record
from toolref_server.storage.record import Record
from toolref_server.storage.store import NewRecord, Store


class Records(Protocol):
    """What registering and fetching records use (the service's `Services` holds them)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...

    @property
    def workers(self) -> Workers: ...


@dataclass(frozen=True, slots=True)
class Conversation:
    fmt: Format
    messages: list[Any]
    texts: list[str]  # each message as its sender wrote it
    scan: Scan
    detection: Detection  # where format detection stands after the messages (unnamed)

    @property
    def size(self) -> int:
        """Characters of its text (what it fills and joins to)."""
        return sum(map(len, self.texts))


@dataclass(frozen=True, slots=True)
class Registration:
    refs: dict[str, str]  # pair key -> ref, for the pairs now safely held
    new: int
    hits: int
    skipped: str | None = None  # the quota that kept anything from being registered


def joined(texts: Sequence[str]) -> bytes:
    """The JSON array of messages given as texts. Each is encoded on its own: one non-ASCII
    message would make a joined string wide, and its encoding slow, for all of them. One
    join, brackets included: the array is built once, not copied again to add them."""
    pieces = [b"["]
    for text in texts:
        pieces += (text.encode(), b",")
    pieces[-1] = b"]" if texts else b"[]"
    return b"".join(pieces)


def joined_size(texts: Sequence[str]) -> int:
    """`len(joined(texts))` without building it (an ASCII text's length is its size)."""
    size = sum(len(text) if text.isascii() else len(text.encode()) for text in texts)
    return size + max(len(texts) - 1, 0) + 2


def messages_of(decoded: documents.Decoded) -> tuple[list[Any], list[str]]:
    """The body's messages (checked to be a list of objects) and the text of each as sent."""
    value = decoded.value
    messages = formats.check_messages(value.get("messages") if isinstance(value, dict) else None)
    texts = decoded.texts
    if texts is None or len(texts) != len(messages):
        texts = [dumps_json(message).decode() for message in messages]
    return messages, texts


def shallow(value: Any) -> Any:
    """A body with its messages left out, for validating its other members: the format
    layer checks the messages as it reads them (validating them again would copy the
    whole conversation)."""
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return {**value, "messages": []}
    return value


def detected(messages: list[Any], named: FormatName | None) -> tuple[Format, Detection]:
    """The conversation's format (`named` when given) and the unnamed detection a history
    node keeps (a conversation that fits `named` always leaves it among the candidates)."""
    try:
        detection = formats.detection(messages)
    except ValidationError:
        formats.detect(messages, named)  # the named format's own error, when it has one
        raise
    if named is None:
        return detection.best(), detection
    return formats.detect(messages, named), detection


def conversation_of_decoded(
    limit: int, decoded: documents.Decoded, named: FormatName | None
) -> Conversation:
    """The body's conversation: read, its format detected, its invocations paired. Linear."""
    messages, texts = messages_of(decoded)
    check_length(limit, len(messages))
    fmt, detection = detected(messages, named)
    return Conversation(fmt, messages, texts, formats.scan(messages, fmt), detection)


def check_length(limit: int, count: int) -> None:
    if count > limit:
        raise BatchTooLargeError(
            f"the conversation has {count} messages, over the limit of {limit}; send fewer",
            limit=limit,
        )


async def register(services: Records, tenant: str, conversation: Conversation) -> Registration:
    """Store the complete invocations, payloads as written; a ref that collides is left
    out (sent in full)."""
    threshold = services.settings.compress_threshold
    work = services.workers.weigh(*conversation.texts)  # its objects and arrays too
    items, refs = await services.workers.run(work, _records, conversation, threshold)
    outcomes = await services.store.register(tenant, list(items.values()))
    held = {
        str(item.ref)
        for item, outcome in zip(items.values(), outcomes, strict=True)
        if outcome.stored_digest == item.digest
    }
    new = sum(o.new for o in outcomes)
    return Registration(
        refs={key: ref for key, ref in refs.items() if ref in held},
        new=new,
        hits=len(held) - new,
    )


def _records(
    conversation: Conversation, threshold: int
) -> tuple[dict[str, NewRecord], dict[str, str]]:
    """The record of each distinct complete invocation (by ref), and each pair's ref: the
    digests, linear in the payloads."""
    pairs = conversation.scan.complete
    texts = source.payloads(conversation.texts, pairs)
    items: dict[str, NewRecord] = {}
    refs: dict[str, str] = {}
    for pair in pairs:
        invocation = pair.invocation()
        digest = invocation_digest(
            invocation["name"], invocation["args"], invocation["result"], invocation["isError"]
        )
        ref = str(digest.ref)
        refs[pair.key] = ref
        if ref not in items:
            data = record.encode(
                invocation["name"],
                is_error=invocation["isError"],
                payload=texts[pair.key],
                digest=digest.sha256,
                size=digest.size,
                compress_threshold=threshold,
            )
            items[ref] = NewRecord(digest.ref, digest.sha256, data)
    return items, refs


def references_of(conversation: Conversation, refs: dict[str, str]) -> dict[str, str]:
    """toolReferences: every call id in the messages whose invocation has a held ref."""
    found = {}
    for pair in conversation.scan.pairs:
        ref = pair.ref or refs.get(pair.key)
        if ref is not None:
            found[pair.key] = ref
    return found


def stats(original: int, optimized: int, used: int, new: int, hits: int) -> dict[str, int]:
    return {
        "originalBytes": original,
        "optimizedBytes": optimized,
        "refsUsed": used,
        "newRefs": new,
        "cacheHits": hits,
    }


async def resolve_markers(services: Records, tenant: str, refs: list[str]) -> dict[str, Record]:
    """Records for every ref, or 409 listing all the refs that are not held."""
    held, missing = await held_records(services, tenant, refs)
    missing_refs(missing)
    return held


def missing_refs(missing: list[str]) -> None:
    """409 `missing-refs` listing `missing`, if any."""
    if missing:
        raise MissingRefsError(
            f"{len(missing)} ref(s) in the messages are not held (expired, evicted, or never "
            "registered for this API key); resend those invocations in full",
            missing,
        )


async def held_records(
    found_in: Records, tenant: str, refs: Sequence[str]
) -> tuple[dict[str, Record], list[str]]:
    """The record of every ref the store holds (lifetimes extended), and the refs it does
    not hold (absent, or another invocation under a colliding key). Records that inflate
    past the inflated limit together are refused (413) before any is inflated: a few
    hundred bytes in the store may hold megabytes."""
    limit = found_in.settings.max_decompressed_bytes
    records = await found_in.store.fetch(tenant, [Ref(r) for r in refs], limit=limit)
    found: dict[str, Record] = {}
    missing: list[str] = []
    for ref, kept in zip(refs, records, strict=True):
        if kept is None or kept.digest[:16] != Ref(ref).digest_prefix:
            missing.append(ref)
        else:
            found[ref] = kept
    return found, missing
