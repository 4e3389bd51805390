"""An edit on the wire (`application/vnd.toolref.edit`): a JSON header line, then the inline
segments' bytes.

    {"v":2,"b":"tb_..."|null,"o":[[0,57],"tp_...",312,...],"n":<inline bytes>}\\n
    <a record per inline segment: as it is, or a zstd frame of its own (`isolated`)>

    {"v":1,"b":"tb_..."|null,"o":[[0,57],"tp_...",312,...],"n":<inline bytes>,"z":<size>}\\n
    <the inline segments, one after the other; zstd when "z" is there>

Ops in `"o"`, in order: `[start, end]` keeps base entries start to end (excluded), a `tp_`
ref names a piece the registry holds, an integer is the length of the next inline segment.
`"n"` is the inline bytes in all. Version 2 (size-guarded, what clients send by default)
carries each inline segment in a compression context of its own (`toolref.edits.isolated`:
no segment's size depends on another's bytes). Version 3 is version 2 whose assistant
segments may be compressed against the answer the base's request streamed
(`toolref.edits.answer`), named by `"a"` (`answer_id`): a receiver holding no such answer
for the base refuses it (400 `dictionary-mismatch`), and the sender sends it again as
version 2. Version 1 (a client that compresses across
the conversation, knowingly: sizes are signals) carries them as one: with `"z"`, one zstd
frame (size and checksum declared) compressed against the last `z` bytes of the base's
segments in `edit.dictionary_order` (`"z": 0`: plain zstd); without it, as they are.

The header is JSON so that any peer can read it; it is small (a few bytes per op). Reading
it is bounded before any other work: `MAX_HEADER` bytes (nesting as deep as the parser
takes, refused cleanly past it), and the
recipe it makes within the caller's limits: its entries (every kept range counted by its
length, so 62 bytes keeping a million entries are refused, not built) and its inline bytes,
refused before any is inflated. An inline segment is never empty but the headers' (the
first op): an empty segment weighs no bytes, so only entries would bound it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Final

import zstandard

from toolref.edits import compact, copies, isolated, shipped
from toolref.edits.answer import ID_LENGTH, answer_id
from toolref.edits.edit import Inline, Keep, Named, Op
from toolref.edits.recipe import is_recipe_ref, parse_piece_ref, piece_ref
from toolref.wire import compression
from toolref.wire.compression import Meter
from toolref.wire.errors import (
    DecompressedTooLargeError,
    DictionaryMismatchError,
    MalformedBodyError,
    TooManyItemsError,
)

MEDIA_TYPE: Final = "application/vnd.toolref.edit"
# The highest this version reads and writes (`compact`). 6: the receiver keeps the answers of
# OpenAI Responses and Gemini too, so a sender taps them (`answer.SINCE`); its edits are
# written as version 5's (the records the same). 7: records may be zstd frames against the
# shipped dictionary (`isolated`, kind 7; `shipped`). 8: the model's segments may be copies
# of the answer (kind 8; `copies`).
VERSION: Final = 8
VERSIONS: Final = (1, 2, 3, 4, 5, 6, 7, 8)
WRITTEN: Final = 8  # the highest version whose bytes an edit is written in (`written_as`)
JSON_VERSIONS: Final = (1, 2, 3)  # those written with a JSON header line (`compact`: 4, 5)
MAX_HEADER: Final = 4 << 20  # bytes of the header line
DEFAULT_MAX_ENTRIES: Final = 50_000  # entries of the recipe an edit makes (a setting's default)
LEVEL: Final = 3  # zstd level of the inline bytes
MAX_DICTIONARY: Final = 1 << 20  # v1 `z`: bytes of the base the inline bytes compress against
_NO_SPLITS: Final[Mapping[int, Sequence[int]]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Header:
    """An edit as read, before its inline bytes are: `ops` hold an `int` (the length of
    the next inline segment) where the edit carries a segment."""

    base: str | None
    ops: list[Keep | Named | int]
    inline: int  # inline bytes in all
    dictionary: int | None  # v1: zstd against the last this many bytes (0: none); None: as is
    entries: int = 0  # entries of the recipe it makes (each kept one counted)
    version: int = VERSION
    answer: str | None = None  # v3: the answer its model's segments were compressed against

    @property
    def lengths(self) -> list[int]:
        """The length of each inline segment, in order."""
        return [op for op in self.ops if type(op) is int]


def written_as(version: int) -> int:
    """The version whose bytes an edit for a receiver of `version` is written in: its own,
    but 6, which writes 5's (the same records; 6 only promises answers kept)."""
    return 5 if version == 6 else min(version, WRITTEN)


def encode_isolated(
    base: str | None,
    ops: Sequence[Op],
    *,
    compress: bool = True,
    answer: bytes = b"",
    answered: Collection[int] = (),
    runs: Sequence[tuple[int, int]] = (),
    version: int = 3,
    splits: Mapping[int, Sequence[int]] = _NO_SPLITS,
) -> bytes:
    """A version-2 edit's bytes: each inline segment as it is or compressed alone,
    whichever is smaller (`isolated.pack`; `compress` False: as it is). With `answer` (the
    answer `base`'s request streamed) and `answered` (which inline segments, counted from
    0, are the model's), or `runs` ((first, count) of inline segments of one message), a
    version-3 edit when that makes it smaller. `version` 4: the same records after a
    compact header (`compact`), whatever they hold; 5: records may also be brotli streams
    (`isolated`, kinds 5 and 6); 7: also zstd frames against the shipped dictionary (kind
    7); 8: also the model's segments as copies of the answer (kind 8). `splits`: inline
    segment -> the offsets of a message's tool results in it (`Cut.splits`), each piece
    compressed alone (`isolated.pack`)."""
    listed, blobs = _listed(ops)
    with_brotli, with_shipped = version >= 5, version >= shipped.SINCE
    with_copies = version >= copies.SINCE
    usable = answer if base is not None and answered else b""
    named: str | None = None
    if compress and (usable or runs):
        records, made = isolated.pack_both(
            blobs,
            answer=usable,
            answered=answered,
            runs=runs,
            with_brotli=with_brotli,
            splits=splits,
            with_shipped=with_shipped,
            with_copies=with_copies,
        )
        named_cost = compact.ANSWER_BYTES if version >= 4 else len(',"a":""') + ID_LENGTH
        cost = named_cost if usable else 0
        if len(made) + cost < len(records):
            records, named = made, answer_id(usable) if usable else None
            version = max(version, 3)
        elif version < 4:
            version = 2
    else:
        records = isolated.pack(
            blobs,
            compress=compress,
            with_brotli=with_brotli,
            splits=splits,
            with_shipped=with_shipped,
        )
        version = version if version >= 4 else 2
    if version >= 4:
        compact_ops = [_compact_op(op) for op in ops]
        return compact.encode(base, compact_ops, named, written_as(version)) + records
    header: dict[str, Any] = {"v": version, "b": base, "o": listed, "n": sum(map(len, blobs))}
    if named is not None:
        header["a"] = named
    line = json.dumps(header, separators=(",", ":")).encode("ascii")
    return line + b"\n" + records


def _compact_op(op: Op) -> Keep | Named | int:
    return len(op.data) if isinstance(op, Inline) else op


def _listed(ops: Sequence[Op]) -> tuple[list[Any], list[bytes]]:
    listed: list[Any] = []
    blobs: list[bytes] = []
    for op in ops:
        if isinstance(op, Keep):
            listed.append([op.start, op.end])
        elif isinstance(op, Named):
            listed.append(piece_ref(op.piece))
        else:
            listed.append(len(op.data))
            blobs.append(op.data)
    return listed, blobs


def encode(base: str | None, ops: Sequence[Op], dictionary: bytes | None) -> bytes:
    """A version-1 edit's bytes, its inline segments as one. `dictionary`: compress them
    against it (b"": plain zstd); None: send them as they are (a peer that reads no zstd).
    Compressed against the base's bytes, an inline segment's size tells what else the
    conversation holds: see `encode_isolated` for what clients send by default."""
    listed, blobs = _listed(ops)
    blob = b"".join(blobs)
    header: dict[str, Any] = {"v": 1, "b": base, "o": listed, "n": len(blob)}
    if dictionary is not None:
        header["z"] = len(dictionary)
        blob = _compress(blob, dictionary)
    line = json.dumps(header, separators=(",", ":")).encode("ascii")
    return line + b"\n" + blob


def _compress(data: bytes, dictionary: bytes) -> bytes:
    if dictionary:
        return compression.compress(data, dictionary, LEVEL)
    compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=True)
    return compressor.compress(data)


def read(
    data: bytes, max_inline: int, max_entries: int = DEFAULT_MAX_ENTRIES
) -> tuple[Header, bytes]:
    """The header and the bytes after it; `MalformedBodyError` for anything else, with
    what is wrong and the fix; `DecompressedTooLargeError` for inline bytes past
    `max_inline` (before any is inflated); `TooManyItemsError` for a recipe of more than
    `max_entries` entries (before any is built). O(header line)."""
    if data[:1] and data[0] in compact.MARKS:
        return _read_compact(data, max_inline, max_entries)
    end = data.find(b"\n", 0, MAX_HEADER + 1)
    if end < 0:
        raise _malformed(f"no header line within the first {MAX_HEADER} bytes")
    try:
        header = json.loads(data[:end])  # nested too deep: RecursionError, raised cleanly
    except (ValueError, RecursionError) as exc:
        raise _malformed(f"the header line is not JSON ({exc})") from None
    version = header.get("v") if isinstance(header, dict) else None
    if type(version) is not int or version not in JSON_VERSIONS:
        raise _malformed(
            f"the header is not an edit object of version {JSON_VERSIONS} (versions 4 and 5 "
            "have a compact header, starting with their version's byte)"
        )
    assert isinstance(header, dict)
    base = header.get("b")
    if base is not None and not is_recipe_ref(base):
        raise _malformed(f"`b` is {_shown(base)}, not null or a recipe ref (tb_...)")
    listed, inline = header.get("o"), header.get("n")
    if not isinstance(listed, list) or not listed:
        raise _malformed("`o` is not a list of ops, the headers' segment first")
    if len(listed) > max_entries:
        raise _too_many(len(listed), max_entries)
    if type(inline) is not int or inline < 0:
        raise _malformed("`n` is not the count of inline bytes")
    if inline > max_inline:
        raise DecompressedTooLargeError(
            f"the edit carries {inline} inline bytes, over the limit of {max_inline}; send "
            "fewer new segments, or the request whole",
            limit=max_inline,
        )
    dictionary = header.get("z")
    if dictionary is not None and (type(dictionary) is not int or dictionary < 0):
        raise _malformed("`z` is not a dictionary size")
    if dictionary is not None and version != 1:
        raise _malformed(f"`z` is a version-1 member, and this edit is of version {version}")
    if dictionary is not None and dictionary > MAX_DICTIONARY:
        raise _malformed(
            f"`z` is {dictionary}, over the {MAX_DICTIONARY} bytes a dictionary may take of the "
            "base; compress against fewer of its last bytes"
        )
    answer = header.get("a")
    if answer is not None and not _is_answer_id(answer):
        raise _malformed(f"`a` is {_shown(answer)}, not the {ID_LENGTH} hex digits of an answer")
    if version != 3 and answer is not None:
        raise _malformed(f"`a` is a version-3 member, and this edit is of version {version}")
    ops = [_op(op, index) for index, op in enumerate(listed)]
    if sum(op for op in ops if type(op) is int) != inline:
        raise _malformed("the inline lengths of `o` do not add up to `n`")
    found = answer if isinstance(answer, str) else None
    header = _checked(Header(base, ops, inline, dictionary, 0, version, found), max_entries)
    return header, data[end + 1 :]


def _read_compact(data: bytes, max_inline: int, max_entries: int) -> tuple[Header, bytes]:
    """A version-4 or -5 edit (`compact`): its header read, checked as a JSON one is."""
    try:
        base, ops, answer, end = compact.decode(data, max_entries)
    except compact.TooManyOps as exc:
        raise _too_many(exc.count, max_entries) from None
    except compact.Unreadable as exc:
        raise _malformed(f"the compact header: {exc}") from None
    if not ops:
        raise _malformed("the compact header lists no ops, the headers' segment first")
    if any(type(op) is int and op == 0 for op in ops[1:]):
        raise _malformed("an inline segment after the headers' is empty")
    inline = sum(op for op in ops if type(op) is int)
    if inline > max_inline:
        raise DecompressedTooLargeError(
            f"the edit carries {inline} inline bytes, over the limit of {max_inline}; send "
            "fewer new segments, or the request whole",
            limit=max_inline,
        )
    header = Header(base, ops, inline, None, 0, data[0], answer)
    return _checked(header, max_entries), data[end:]


def _checked(header: Header, max_entries: int) -> Header:
    """`header` with its entries counted (each kept one), once its rules hold: keeps and
    an answer only with a base, within `max_entries`."""
    ops = header.ops
    if header.base is None and any(isinstance(op, Keep) for op in ops):
        raise _malformed("an edit with no base (`b` null) keeps nothing")
    if header.base is None and header.answer is not None:
        raise _malformed("an edit naming an answer (`a`) has a base (`b`): it is its base's")
    entries = sum(op.end - op.start if isinstance(op, Keep) else 1 for op in ops)
    if entries > max_entries:
        raise _too_many(entries, max_entries)
    return replace(header, entries=entries)


def described(data: bytes) -> dict[str, Any]:
    """An edit's header as the JSON header line of versions 1-3 says it (`v`, `b`, `o`, `n`,
    and `a` or `z` where there is one), whatever its version: for tools and tests that
    read edits. `MalformedBodyError` as `read`."""
    header, _ = read(data, 1 << 62, 1 << 62)
    listed: list[Any] = [
        [op.start, op.end]
        if isinstance(op, Keep)
        else piece_ref(op.piece)
        if isinstance(op, Named)
        else op
        for op in header.ops
    ]
    found: dict[str, Any] = {"v": header.version, "b": header.base, "o": listed, "n": header.inline}
    if header.answer is not None:
        found["a"] = header.answer
    if header.dictionary is not None:
        found["z"] = header.dictionary
    return found


def _is_answer_id(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) == ID_LENGTH
        and all(c in "0123456789abcdef" for c in value)
    )


def _too_many(entries: int, limit: int) -> TooManyItemsError:
    return TooManyItemsError(
        f"the edit makes a recipe of {entries} entries, over the limit of {limit} "
        "(TOOLREF_MAX_EDIT_ENTRIES); send a smaller request, or the request whole",
        limit=limit,
    )


def _op(op: object, index: int) -> Keep | Named | int:
    if type(op) is int and (op > 0 or (op == 0 and index == 0)):
        return op
    if isinstance(op, list) and len(op) == 2 and all(type(i) is int for i in op):
        start, end = op
        if 0 <= start < end:
            return Keep(start, end)
    found = parse_piece_ref(op)
    if found is not None:
        return Named(found)
    raise _malformed(
        f"op {index} is {_shown(op)}: an op is [start, end] (start < end), a tp_ ref or the "
        "length of an inline segment (more than 0 but for the headers' segment, op 0)"
    )


def inline(
    header: Header,
    blob: bytes,
    dictionary: bytes,
    meter: Meter | None,
    answer: bytes | None = None,
) -> list[bytes]:
    """The inline segments, in order. Versions 2 and 3: each record read
    (`isolated.unpack`; version 3 against `answer`, the base's, whose id the caller
    checked). Version 1: `blob` inflated against `dictionary` (the last
    `header.dictionary` bytes the edit names), and cut. Inflated bytes are charged to
    `meter` before they are."""
    if header.version >= 2:
        named = answer if header.version >= 3 and header.answer is not None else None
        return isolated.unpack(
            blob,
            header.lengths,
            meter,
            named,
            runs=header.version >= 3,
            with_brotli=header.version >= 5,
            with_shipped=header.version >= shipped.SINCE,
            with_copies=header.version >= copies.SINCE,
        )
    raw = header.dictionary is None
    data = blob if raw else _inflate(blob, dictionary, header.inline, meter)
    if len(data) != header.inline:
        raise _malformed(f"the inline bytes are {len(data)}, not the {header.inline} of `n`")
    found: list[bytes] = []
    at = 0
    for op in header.ops:
        if type(op) is int:
            found.append(data[at : at + op])
            at += op
    return found


def _inflate(blob: bytes, dictionary: bytes, size: int, meter: Meter | None) -> bytes:
    name = "the edit's base"
    if not dictionary:
        return compression.inflate(blob, size, meter)
    try:
        return compression.decompress(blob, dictionary, size, name, meter)
    except DictionaryMismatchError as exc:
        raise DictionaryMismatchError(
            f"{exc.detail.split(';')[0]}; send the edit again with its inline bytes against "
            "the base's segments in edit order (toolref.edits.edit.dictionary), or as they are"
        ) from None


def _malformed(what: str) -> MalformedBodyError:
    return MalformedBodyError(
        f"the edit ({MEDIA_TYPE}) cannot be read: {what}; send a header line as "
        "toolref.edits.wire.encode writes it, or the request whole"
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
