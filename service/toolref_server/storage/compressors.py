"""zstd contexts, one per thread and dictionary: a context is not safe to share, and the worker
pool compresses and decompresses records and history messages off the event loop.

What is written (which shipped dictionary for records and for history messages, at which
level) is `writing`, set once from the settings when the app starts; what is read is any
frame this version can decode: plain, or with a shipped dictionary, which the frame names.

These are the only zstd objects kept past a request, on purpose: bounded by (threads) x
(shipped dictionaries) x (levels in use), each a context with no reference back to anything
of a request (the C objects are not tracked by the cyclic collector, so a cycle through one
would never be freed; none exists here). So does the SDK's compressor for frames of their
own (`toolref.edits.isolated`, one per thread, no dictionary). Every other compressor and
decompressor, here and in the SDK, lives for one call or one request body.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

import zstandard

from toolref.wire import dictionaries
from toolref.wire.dictionaries import Kind

DEFAULT_LEVEL: Final = 3
DEFAULT_DICTIONARY: Final = 1  # for records and history messages alike

_local = threading.local()


class UnknownDictionaryError(ValueError):
    """A frame compressed with a dictionary this version does not ship."""


@dataclass(frozen=True, slots=True)
class Writing:
    records: int = DEFAULT_DICTIONARY  # dictionary number; 0: none
    messages: int = DEFAULT_DICTIONARY
    level: int = DEFAULT_LEVEL


writing = Writing()


def configure(*, records: int, messages: int, level: int) -> None:
    """What new frames are written with (`ValueError` for a dictionary not shipped)."""
    global writing  # noqa: PLW0603 - one setting for the process, like the worker pool
    for kind, number in (("records", records), ("messages", messages)):
        if number:
            dictionaries.lookup(kind, number)  # type: ignore[arg-type]
    writing = Writing(records, messages, level)


def _compressor(dict_id: int, level: int) -> zstandard.ZstdCompressor:
    cache: dict[tuple[int, int], zstandard.ZstdCompressor] | None = getattr(
        _local, "compressors", None
    )
    if cache is None:
        cache = _local.compressors = {}
    found = cache.get((dict_id, level))
    if found is None:
        dictionary = dictionaries.by_id(dict_id) if dict_id else None
        found = cache[(dict_id, level)] = zstandard.ZstdCompressor(
            level=level, dict_data=dictionary
        )
    return found


def _decompressor(dict_id: int) -> zstandard.ZstdDecompressor:
    cache: dict[int, zstandard.ZstdDecompressor] | None = getattr(_local, "decompressors", None)
    if cache is None:
        cache = _local.decompressors = {}
    found = cache.get(dict_id)
    if found is None:
        dictionary = dictionaries.by_id(dict_id) if dict_id else None
        if dict_id and dictionary is None:
            raise UnknownDictionaryError(
                f"zstd frame compressed with dictionary id {dict_id}, which this version does "
                f"not ship (it ships {sorted(dictionaries.BY_ID)}); it was written by a newer "
                "version: roll readers out before writers (docs/operations.md)"
            )
        found = cache[dict_id] = zstandard.ZstdDecompressor(dict_data=dictionary)
    return found


def compress(data: bytes, kind: Kind | None = None) -> bytes:
    """One zstd frame of `data` (linear in it), with the dictionary `writing` names for
    `kind` (none for None or 0)."""
    number = getattr(writing, kind) if kind is not None else 0
    dict_id = dictionaries.BASES[kind] + number if kind is not None and number else 0
    return _compressor(dict_id, writing.level).compress(data)


def inflated_size(data: bytes) -> int:
    """The size one zstd frame declares for its content, read without inflating it (the
    frame's own length when it declares none, or is not a frame)."""
    try:
        declared = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError:
        return len(data)
    return int(declared) if declared > 0 else len(data)


def decompress(data: bytes) -> bytes:
    """The content of one zstd frame that records its size (all this service writes), with
    the dictionary it names; `UnknownDictionaryError` for one this version lacks."""
    dict_id = zstandard.get_frame_parameters(data).dict_id
    return _decompressor(dict_id).decompress(data)
