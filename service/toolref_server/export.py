"""`toolref-server cache export|import`: records and summaries to a file and back.

The file is a zstd-compressed stream of msgpack items: a header
`{"toolrefExport": 1, "tenant": ...}`, then one `[key, value, ttl_ms]` per key (`ttl_ms` is
-1 for keys without expiry). The engine is read and written by `storage.keyspace`: export
reads a page of keys at a time, so memory stays constant whatever the size; import writes
with `SET NX`, so importing twice (or into an engine that already holds some keys) changes
nothing twice. Exported (`storage.keys.EXPORTED`): records (`i`), summaries (`s`) and
dialogue summaries (`d`); never summary locks or counters (nor edited requests' recipes,
which any client resends by itself).

Import trusts nothing in the file. It reads the whole file once to check every item
(`check_item`) and writes nothing unless all pass, then reads it again to write (a file that
cannot be read twice, stdin, is first copied to a temporary file: memory stays constant),
checking each item again as it is written: a file rewritten between the two reads is
refused at its first changed item, saying how many keys were imported before it.
Every key must be under the tenant the header names (or `--tenant`); every record must hold
what its ref names (the SHA-256 of its canonical invocation, recomputed, equals its stored
digest, which starts with the ref: `record.verified`); a summary cannot be checked against
anything but its key's shape, so an export of all tenants is only as trustworthy as its
source.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Final

import msgpack
import zstandard

from toolref.wire.canonical import Ref, is_ref
from toolref.wire.errors import StoreUnavailableError, ValidationError
from toolref.wire.models import MAX_SUMMARY_CHARS  # the largest summary budget (maxChars)
from toolref_server.context.replacing import PINNED, longest_pinned
from toolref_server.settings import TENANT_RE as TENANT_NAME  # the one tenant grammar
from toolref_server.settings import Settings
from toolref_server.settings.bodies import BodyLimits
from toolref_server.settings.records import RecordSettings
from toolref_server.storage import keys, keyspace, outage, record
from toolref_server.storage.keyspace import Client

FORMAT: Final = 1
_PAGE: Final = keyspace.PAGE
_SLACK: Final = 64 << 10  # an item's key and framing, a record's header, beside its content
_READ: Final = 64 << 10  # compressed bytes read from the file at a time
_PIECE: Final = 512  # of them fed to the inflater at a time: 16 MiB inflated at most
_FED: Final = 64 << 10  # inflated bytes fed to the item reader at a time
_MEMBERS: Final = 8  # of an array or map: an item has 3, the header 3 (msgpack: refused unbuilt)


@dataclass(frozen=True, slots=True)
class Limits:
    """What an import writes, by the settings of the registry it writes for: each key
    lives at most `ttl_seconds` (TOOLREF_TTL_SECONDS; one without a lifetime gets that), and
    a record holds at most `max_bytes` once inflated (TOOLREF_MAX_DECOMPRESSED_BYTES: no
    request within it could have made a larger one). Defaults: those settings' defaults."""

    ttl_seconds: int = RecordSettings.model_fields["ttl_seconds"].default
    max_bytes: int = BodyLimits.model_fields["max_decompressed_bytes"].default

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.ttl_seconds, settings.max_decompressed_bytes)

    @property
    def max_item(self) -> int:
        """Bytes of one item of the file, as stored: its record within `max_bytes`."""
        return self.max_bytes + _SLACK


Progress = Callable[[int, int], None]  # (keys done, bytes done)


def _check_tenant(tenant: str | None) -> None:
    """A tenant is matched literally: a name outside the tenant grammar (empty, a glob, a
    colon) would widen the match to other tenants' keys, so it is refused."""
    if tenant is not None and not TENANT_NAME.fullmatch(tenant):
        raise ValidationError(
            f"{tenant!r} is not a tenant name (1-64 of A-Z a-z 0-9 _ . -, as in "
            "TOOLREF_API_KEYS); name one tenant, or leave out --tenant to export them all"
        )


def export(
    redis: Client,
    out: IO[bytes],
    tenant: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Write every record and summary (of one tenant, or all) to `out`; return the count."""
    _check_tenant(tenant)  # refuses a bad tenant before anything is written
    count = size = 0
    # The writer's sink is `out`, which refers to nothing of it: no cycle through the C
    # writer (which the collector does not track); it is freed when the export returns.
    writer = zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False)
    packer = msgpack.Packer(use_bin_type=True)
    writer.write(
        packer.pack({"toolrefExport": FORMAT, "tenant": tenant, "created": int(time.time())})
    )
    for page in keyspace.items(redis, tenant):
        for key, value, ttl in page:
            item = packer.pack([key, value, ttl])
            writer.write(item)
            count += 1
            size += len(item)
        if progress is not None:
            progress(count, size)
    writer.flush(zstandard.FLUSH_FRAME)
    return count


def import_(
    redis: Client,
    source: IO[bytes],
    progress: Progress | None = None,
    tenant: str | None = None,
    checked: Progress | None = None,
    *,
    limits: Limits = Limits(),
) -> tuple[int, int]:
    """Check every item of an export, then write the keys that are absent; return (written,
    already present). A file with one bad item is refused whole (`ValidationError` naming
    the first), and nothing is written. `tenant`: every key must be that tenant's.
    `limits`: the importing registry's (`Limits.of(settings)`)."""
    _check_tenant(tenant)
    with _rereadable(source) as stream:
        start = stream.tell()
        total = verify(stream, tenant, checked, limits)
        stream.seek(start)
        return _write(redis, stream, progress, limits, total, tenant=tenant)


@contextlib.contextmanager
def _rereadable(source: IO[bytes]) -> Iterator[IO[bytes]]:
    """`source`, or (when it cannot seek, as stdin) a temporary copy of it, read once in
    1 MiB pieces: a file import reads twice (check everything, then write)."""
    if source.seekable():
        yield source
        return
    with tempfile.TemporaryFile() as copy:
        shutil.copyfileobj(source, copy, 2**20)
        copy.seek(0)
        yield copy


def _items(source: IO[bytes], limits: Limits) -> Iterator[Any]:
    """The msgpack items of an export's zstd stream, one at a time; a `ValidationError` when
    the stream does not end where a frame and an item end (a file cut short: zstd's stream
    reader would hand back the prefix as if it were whole), or for an item larger than
    `limits.max_item`. Input is fed `_PIECE` bytes at a time, so what one step inflates to
    stays bounded (a run-length block takes 4 bytes and inflates to 128 KiB: 32 MiB per KiB
    of input, 16 MiB a step), and handed to the item reader `_FED` bytes at a time; memory
    otherwise holds one item, and an item one array (or the header one map) of `_MEMBERS`
    at most: nothing nests in them, so a file of small arrays cannot hold 60 times its size
    (an empty array: one byte read, a list of 56 built)."""
    built = 0

    def container(value: Any) -> Any:
        nonlocal built
        built += 1
        if built > 1:
            raise _not_export("holds an array or map inside an item")
        return value

    unpacker = msgpack.Unpacker(
        raw=False,
        max_buffer_size=limits.max_item + _FED,
        max_array_len=_MEMBERS,
        max_map_len=_MEMBERS,
        list_hook=container,
        object_hook=container,
    )
    decompressor = zstandard.ZstdDecompressor()
    inflater, open_frame, fed, parsed = decompressor.decompressobj(), False, 0, 0
    try:
        while read := source.read(_READ):
            pieces = [read[at : at + _PIECE] for at in range(0, len(read), _PIECE)][::-1]
            while pieces:
                piece = pieces.pop()
                open_frame = True
                out = inflater.decompress(piece)
                if inflater.eof:  # a frame ended; another may follow it
                    if inflater.unused_data:
                        pieces.append(inflater.unused_data)
                    inflater, open_frame = decompressor.decompressobj(), False
                for at in range(0, len(out), _FED):
                    unpacker.feed(out[at : at + _FED])
                    fed += min(_FED, len(out) - at)
                    for item in unpacker:
                        parsed, built = unpacker.tell(), 0  # where the last whole item ends
                        yield item
                    if fed - parsed > limits.max_item:
                        raise _oversized(fed - parsed, limits)
    except msgpack.BufferFull:
        raise _oversized(fed - parsed, limits) from None
    except (zstandard.ZstdError, msgpack.UnpackException, ValueError) as exc:
        if isinstance(exc, ValidationError):
            raise
        if "max_array_len" in str(exc) or "max_map_len" in str(exc):  # over `_MEMBERS`
            raise _not_export(f"holds an array or map of more than {_MEMBERS} members") from None
        raise _unreadable(f"{type(exc).__name__}: {exc}") from None
    if open_frame or fed == 0:
        raise _unreadable("its zstd stream ends before its frame does")
    if parsed != fed:
        raise _unreadable(f"its last {fed - parsed} bytes are part of an item")


def _oversized(size: int, limits: Limits) -> ValidationError:
    return ValidationError(
        f"the file holds an item of more than {size} bytes, over the {limits.max_item} an "
        f"item may take (a record within TOOLREF_MAX_DECOMPRESSED_BYTES, {limits.max_bytes}, "
        "and its key); nothing was imported. Import it into a registry whose "
        "TOOLREF_MAX_DECOMPRESSED_BYTES is as large as the one it was exported from (set it "
        "for the import too), or make the file again with `toolref-server cache export`"
    )


def _not_export(what: str) -> ValidationError:
    return ValidationError(
        f"the file {what}, which no export holds (each item is [key, value, ttl]); nothing "
        "was imported. Make the file again with `toolref-server cache export`"
    )


def _unreadable(why: str) -> ValidationError:
    return ValidationError(
        f"the file cannot be read to its end ({why}); nothing was imported. Copy it again, "
        "whole, or make it again with `toolref-server cache export`"
    )


def _header(items: Iterator[Any]) -> dict[str, Any]:
    header = next(items, None)
    if not isinstance(header, dict) or header.get("toolrefExport") != FORMAT:
        raise ValidationError(
            "the file is not a toolref export (version 1); make one with "
            "`toolref-server cache export`"
        )
    return header


def _owner(header: dict[str, Any], tenant: str | None) -> str | None:
    """The tenant every key of the file must be under (`tenant`, else the one its header
    names; None: any), once the header agrees with `tenant`."""
    named = header.get("tenant")
    if named is not None and (not isinstance(named, str) or not TENANT_NAME.fullmatch(named)):
        raise ValidationError(
            f"the file's header names {named!r}, which is not a tenant name; nothing was "
            "imported. Make the file again with `toolref-server cache export --tenant NAME`"
        )
    if tenant is not None and named not in (None, tenant):
        raise ValidationError(
            f"the file is an export of tenant {named!r}, not of {tenant!r} (--tenant); nothing "
            "was imported. Import it without --tenant, or name its tenant"
        )
    return tenant if tenant is not None else named


def verify(
    source: IO[bytes],
    tenant: str | None = None,
    progress: Progress | None = None,
    limits: Limits = Limits(),
) -> int:
    """Check every item of an export (`check_item`) without writing anything; return how
    many there are. Linear in the file; memory: one item at a time."""
    items = _items(source, limits)
    owner = _owner(_header(items), tenant)
    count = 0
    for count, item in enumerate(items, start=1):
        problem = check_item(item, owner, limits)
        if problem is not None:
            shown = _shown_key(item)
            raise ValidationError(
                f"item {count} of the file ({shown}) {problem}; nothing was imported. The file "
                "was changed or made by something else than `toolref-server cache export`: "
                "make it again from the registry that holds these keys",
                item=count,
            )
        if progress is not None and count % _PAGE == 0:
            progress(count, 0)
    if progress is not None:
        progress(count, 0)
    return count


def _shown_key(item: Any) -> str:
    key = item[0] if isinstance(item, list | tuple) and item else None
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if isinstance(key, str):
        return f"key {key[:120]!r}"
    return f"a {type(item).__name__}, not a [key, value, ttl] item"


def check_item(item: Any, tenant: str | None, limits: Limits = Limits()) -> str | None:
    """What is wrong with one `[key, value, ttl_ms]` item of an export (None: nothing).
    `tenant`: the tenant every key must belong to, when the file names one. Pure; linear
    in the item (a record's size read from its frame, then its content inflated and
    hashed)."""
    if not isinstance(item, list | tuple) or len(item) != 3:
        return "is not a [key, value, ttl] item"
    key, value, ttl = item
    if isinstance(key, bytes):
        try:
            key = key.decode("utf-8")
        except UnicodeDecodeError:
            return "has a key that is not UTF-8"
    if not isinstance(key, str) or not isinstance(value, bytes):
        return "has a key that is not text or a value that is not bytes"
    if type(ttl) is not int or not (ttl == -1 or ttl > 0):
        return f"has a lifetime of {ttl!r}, neither -1 nor a positive number of milliseconds"
    parts = keys.parse(key)
    if parts is None or not TENANT_NAME.fullmatch(parts.tenant):
        return f"has a key that is not `{keys.SHAPE}`"
    owner, kind, rest = parts
    if tenant is not None and owner != tenant:
        return f"is under tenant {owner!r}, but the file is an export of tenant {tenant!r}"
    check = _CHECKS.get(kind)
    if check is None:
        return f"is of kind {kind!r}, which exports never hold (they hold {', '.join(_CHECKS)})"
    return check(rest, value, limits)


def _check_record(rest: str, value: bytes, limits: Limits) -> str | None:
    if not is_ref("tr_" + rest):
        return "has a record key whose ref is malformed"
    size = record.work_size(value)  # as its zstd frame declares it: nothing inflated yet
    if size > limits.max_bytes + _SLACK:
        return (
            f"holds a record of {size} bytes once inflated, over "
            f"TOOLREF_MAX_DECOMPRESSED_BYTES ({limits.max_bytes}): no request the importing "
            "registry reads could have made it (set TOOLREF_MAX_DECOMPRESSED_BYTES for the "
            "import as the registry it came from had it, or leave the record out)"
        )
    try:
        record.decode(value)
    except record.UnknownDictionaryError as exc:
        return f"holds a record that cannot be read here: {exc}"
    except Exception:  # noqa: S110 - any other failure is reported just below
        pass
    if record.verified(value, Ref("tr_" + rest)) is None:
        return (
            "holds a record that is not the invocation its ref names (its content does not "
            "hash to it)"
        )
    return None


def _check_summary(rest: str, value: bytes, _limits: Limits) -> str | None:
    """An invocation's summary, or a stand-in context editing pinned (`PINNED`)."""
    return _summary_problem(rest, value, stand_ins=True)


def _check_dialogue(rest: str, value: bytes, _limits: Limits) -> str | None:
    """A handoff dialogue's summary (no stand-in is kept under a dialogue)."""
    return _summary_problem(rest, value, stand_ins=False)


def _summary_problem(rest: str, value: bytes, *, stand_ins: bool) -> str | None:
    """A summary's text is held to the characters its id ends with (at most
    `MAX_SUMMARY_CHARS`); a stand-in's, to the most `stand_in` writes for a summary of
    those (`longest_pinned`, worked out only for a text longer than the summary: linear
    in the text)."""
    body, _, summarizer = rest.partition(":")
    if not is_ref("tr_" + body) or not summarizer or keys.is_lock(summarizer):
        return "has a summary key that is not `<ref>:<summarizer id>`"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "holds a summary that is not UTF-8"
    budget = summarizer.rpartition(":")[2]
    # ASCII digits, no more than the largest budget has: int() refuses `²`, and 4,301 digits
    named = budget.isascii() and budget.isdigit() and len(budget) <= len(str(MAX_SUMMARY_CHARS))
    chars = min(int(budget), MAX_SUMMARY_CHARS) if named else MAX_SUMMARY_CHARS
    if len(text) <= chars:
        return None
    if stand_ins and summarizer.startswith(PINNED):
        most = longest_pinned(chars)
        if len(text) <= most:
            return None
        return (
            f"holds a stand-in of {len(text)} characters, over the {most} any stand-in of a "
            f"summary of {chars} characters takes"
        )
    return f"holds a summary of {len(text)} characters, over its budget of {chars}"


_CHECKS: Final[dict[str, Callable[[str, bytes, Limits], str | None]]] = {
    "i": _check_record,
    "s": _check_summary,
    "d": _check_dialogue,
}


def _write(
    redis: Client,
    source: IO[bytes],
    progress: Progress | None,
    limits: Limits,
    total: int,
    *,
    tenant: str | None,
) -> tuple[int, int]:
    """Write the keys of a checked export (`total` items) that are absent: `SET NX`, one
    pipeline a page, each to live at most `limits.ttl_seconds` (one without a lifetime that
    long). Each item is checked again as it is read (the file may have been rewritten since
    its check): one that fails now is a `ValidationError` saying what was imported before
    it. An engine lost midway is a `StoreUnavailableError` saying what was imported."""
    items = _items(source, limits)
    longest = limits.ttl_seconds * 1000
    try:
        owner = _owner(_header(items), tenant)
    except ValidationError as exc:
        raise _changed(exc.detail.partition(";")[0], 0, total) from None
    written = present = done = 0
    batch: list[list[Any]] = []

    def flush() -> None:
        nonlocal written, present
        try:
            done_now, there = keyspace.put_absent(redis, batch)
        except StoreUnavailableError as exc:
            raise _lost(written + present, total, exc) from None
        written += done_now
        present += there
        batch.clear()

    def read() -> Iterator[Any]:
        try:
            yield from items
        except ValidationError as exc:  # unreadable now, though it was read whole before
            detail = exc.detail.partition("; nothing")[0]
            raise _changed(detail, written + present, total) from None

    for item in read():
        problem = check_item(item, owner, limits)
        if problem is not None:
            shown = f"item {done + 1} of the file ({_shown_key(item)}) {problem}"
            raise _changed(shown, written + present, total)
        key, value, ttl = item
        batch.append([key, value, min(ttl, longest) if ttl > 0 else longest])
        done += 1
        if len(batch) >= _PAGE:
            flush()
            if progress is not None:
                progress(done, 0)
    if batch:
        flush()
    if progress is not None:
        progress(done, 0)
    return written, present


def _changed(what: str, imported: int, total: int) -> ValidationError:
    return ValidationError(
        f"{what}: the file changed since it was checked (it passed then); {imported} keys "
        f"were imported before it (of the {total} checked, each checked again as it was "
        "written), none after. Let nothing write the file while it is imported (import a "
        "copy), and make it again with `toolref-server cache export` if it was changed"
    )


def _lost(imported: int, total: int, exc: StoreUnavailableError) -> StoreUnavailableError:
    cause = exc.detail.partition(";")[0]
    fixed = "the credentials are fixed (the user or password in --redis-url, or its ACL)"
    when = fixed if cause.startswith(outage.CLI_REFUSED) else "the engine answers"
    return StoreUnavailableError(
        f"{cause} after {imported} of the file's {total} keys were imported (the last batch "
        f"may be in part); run the same import again once {when}: it writes only the keys "
        "still absent, and leaves those written as they are"
    )


def bar(verb: str, stream: IO[str] = sys.stderr) -> Progress:
    """A one-line progress display (rewritten in place on a terminal)."""
    started = time.monotonic()
    interactive = stream.isatty()
    last = [0.0]

    def show(keys: int, size: int) -> None:
        now = time.monotonic()
        if interactive or now - last[0] >= 5:
            rate = keys / max(now - started, 1e-6)
            volume = f", {size / 2**20:.1f} MiB" if size else ""
            end = "\r" if interactive else "\n"
            stream.write(f"{verb} {keys:,} keys{volume} ({rate:,.0f}/s){end}")
            stream.flush()
            last[0] = now

    return show
