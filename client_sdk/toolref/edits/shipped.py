"""Segments against the shipped dictionary (record kind 7, edits of version 7: issue 39).

A new segment compressed alone pays for its vocabulary: the first `self.`, `"content":`,
`def `, `Traceback` of a segment are literals, where a body compressed against the one
before finds them there. Compressing against the conversation would make a segment's size
tell what else the conversation holds (the size guard, docs/reliability.md "Sizes"); a
dictionary that ships in the package (`toolref.wire.dictionaries`, messages 1: trained on
this repository's own files dressed as tool output, never on a tenant's data) is the same
for every conversation and tenant, as brotli's built-in one is, so a segment's size still
depends on its own bytes alone.

Measured on the new segments of the shared traces (`python -m loadtests.size_guard`): each
segment's smallest record 9-12% smaller than brotli at quality 5 and zstd alone give, at
about 120 us per KiB at `LEVEL` 19 (12: 9%, 35 us; 7: 7%, 21 us). A sender tries it on the
edit's segments in order while their bytes fit in `BUDGET` (8 KiB an edit: about 1 ms in
segments of a KiB, about 2.3 ms at most, in segments of 41 bytes at 11 us each; a
continuation turn's new segments mostly fit) and keeps the smallest record.

A record of kind 7 is a varint size and one zstd frame per piece (a segment of split tool
results: a frame per result, as kind 1), each declaring its size, with checksum, no
dictionary id (the kind names the dictionary). A later dictionary comes with a version
of its own. Both sides keep one compressor (sender) or decompressor (receiver) per thread:
loading the dictionary costs about as much as compressing a few segments.
"""

from __future__ import annotations

import sys
import threading
from typing import Final

import zstandard

from toolref.wire import dictionaries
from toolref.wire.compression import MAX_WINDOW
from toolref.wire.errors import DecompressedTooLargeError, MalformedBodyError

if sys.version_info >= (3, 14):
    from compression import zstd as stdzstd
else:  # the same module, backported (a dependency before 3.14)
    from backports import zstd as stdzstd

KIND: Final = 0x07
SINCE: Final = 7  # the edits version whose records may be of this kind
DICTIONARY: Final = dictionaries.Shipped("messages", 1)
LEVEL: Final = 19  # 12: 3% larger at a third of the CPU; 7: 5% larger at a sixth
BUDGET: Final = 8 << 10  # bytes of an edit's segments tried, in order
_THREAD: Final = threading.local()
_LOCK: Final = threading.Lock()
_PREPARED: list[zstandard.ZstdCompressionDict] = []  # the dictionary, its tables computed


def _dictionary() -> zstandard.ZstdCompressionDict:
    found = dictionaries.by_id(DICTIONARY.dict_id)
    assert found is not None  # shipped with this package: `dictionaries.by_id` checks it
    return found


def _prepared() -> zstandard.ZstdCompressionDict:
    """The dictionary with its tables for `LEVEL` computed, once per process."""
    with _LOCK:
        if not _PREPARED:
            words = zstandard.ZstdCompressionDict(_dictionary().as_bytes())
            words.precompute_compress(level=LEVEL)
            _PREPARED.append(words)
        return _PREPARED[0]


def compressor() -> zstandard.ZstdCompressor:
    """This thread's compressor against the shipped dictionary (made once per thread; the
    dictionary's tables for `LEVEL` computed once per process)."""
    made: zstandard.ZstdCompressor | None = getattr(_THREAD, "compressor", None)
    if made is None:
        made = _THREAD.compressor = zstandard.ZstdCompressor(
            dict_data=_prepared(), write_checksum=True, write_content_size=True, write_dict_id=False
        )
    return made


def decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor against the shipped dictionary; a frame declaring a
    window past `MAX_WINDOW` fails before its window is allocated."""
    made: zstandard.ZstdDecompressor | None = getattr(_THREAD, "decompressor", None)
    if made is None:
        made = _THREAD.decompressor = zstandard.ZstdDecompressor(
            dict_data=_dictionary(), max_window_size=MAX_WINDOW
        )
    return made


def declared(record: bytes, length: int, most: int, what: str) -> None:
    """The frames of a kind-7 record (of `what`, `length` bytes), before any is inflated:
    each declares its size and checksum, as `compressor` writes them, and together no more
    than `length`. A frame against another dictionary (a sender's bug, a dictionary of a
    later version) inflates without an error to other bytes: only its checksum tells. At
    most `most` frames are walked (the edit's bound left: `compression.inflate` refuses
    more, and says what else is wrong with bytes that are not whole frames). O(frames)."""
    view = memoryview(record)
    at = total = 0
    for _ in range(most):
        if at >= len(view):
            return
        try:
            found = zstandard.get_frame_parameters(view[at:])
            at += stdzstd.get_frame_size(view[at:])
        except (zstandard.ZstdError, stdzstd.ZstdError):
            return  # not whole frames: refused as it is inflated, with the reason
        if not found.has_checksum or found.content_size == zstandard.CONTENTSIZE_UNKNOWN:
            raise MalformedBodyError(
                f"the edit's inline records cannot be read: {what}'s record of kind 7 holds "
                "a frame that does not declare its size and checksum; compress each piece "
                "against the shipped dictionary with them (toolref.edits.shipped), or send "
                "the segment as it is"
            )
        total += found.content_size
        if total > length:
            raise DecompressedTooLargeError(
                f"{what}'s record of kind 7 declares more than its {length} bytes; send "
                "fewer messages",
                limit=length,
            )
