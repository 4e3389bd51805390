"""The stored history a hydrate continues: loaded, with every tool ref it names resolved.

A history is usable only whole. When a tool ref inside it has expired or been evicted the
client cannot resend just that payload (it sent a history ref, not the messages), so that
is answered as a missing history: the SDK then resends the whole conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from toolref import formats, history
from toolref.errors import MissingHistoryError
from toolref.formats import Format, Scan, source
from toolref_server.record import Record
from toolref_server.routes import context


@dataclass(frozen=True, slots=True)
class Continuation:
    ref: str
    fmt: Format
    form: list[Any]  # chain form, as stored
    texts: list[str]  # the same as its client wrote it
    encoded: list[bytes]  # the same as canonical JSON
    scan: Scan
    held: dict[str, Record]  # the record of every ref its markers name

    def full_texts(self) -> list[str]:
        """The history in full, as the client holds it."""
        payloads = {ref: record.payload for ref, record in self.held.items()}
        return source.fill(self.texts, self.scan, payloads)

    def dictionary(self) -> bytes:
        """The zstd dictionary of the history: its messages in full, as written."""
        return history.dictionary_of(
            (text.encode() for text in reversed(self.full_texts())), reverse=True
        )


async def load(request: Request, tenant: str, ref: str) -> Continuation:
    services = context.services(request)
    try:
        return await _load(request, tenant, ref)
    except MissingHistoryError:
        services.metrics.histories.labels(outcome="missing").inc()
        raise


async def _load(request: Request, tenant: str, ref: str) -> Continuation:
    services = context.services(request)
    stored = await services.histories.load(tenant, ref)
    if stored is None or not formats.is_format_name(stored.format):
        raise MissingHistoryError(
            f"history {ref} is not held (never confirmed for this API key, expired or "
            "evicted); send the whole conversation without it",
            ref,
        )
    fmt = formats.get(stored.format)
    scan = formats.scan(stored.form, fmt)
    held, missing = await context.held(request, tenant, scan.refs)
    if missing:
        raise MissingHistoryError(
            f"history {ref} names tool ref {missing[0]}, which is no longer held (expired or "
            "evicted); send the whole conversation without the history",
            ref,
        )
    return Continuation(ref, fmt, stored.form, stored.texts, stored.encoded, scan, held)
