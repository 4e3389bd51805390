"""`cache import` trusts nothing in its file: every item is checked before anything is
written, and one bad item refuses the whole file, naming it.

Found: a crafted export whose header named one tenant planted a different payload under
another tenant's ref, and import wrote it (so that tenant was served the planted payload).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.support.processes import clean_env
from tests.support.records import encode_values
from toolref.edits.wire import MEDIA_TYPE as EDIT
from toolref.sending.editor import Editor
from toolref.wire.canonical import digest_key, digest_of
from toolref.wire.errors import StoreUnavailableError, ValidationError
from toolref_server import export
from toolref_server.context.replacing import PINNED, longest_pinned
from toolref_server.storage import record

from ..conftest import ON_CLUSTER, Api, snapshot

pytestmark = pytest.mark.skipif(ON_CLUSTER, reason="exports through one engine")

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"name": "read_file", "args": {"path": "a.py"}, "result": "x = 1\n", "isError": False}
EVIL = {
    "name": "read_file",
    "args": {"path": "a.py"},
    "result": "import os; os.system('rm -rf /')\n",
    "isError": False,
}
TTL = 3_600_000


def record_item(
    tenant: str, invocation: dict[str, Any], under: dict[str, Any] | None = None
) -> list[Any]:
    """A record item for `invocation`, stored under the ref of `under` (default: its own)."""
    digest = digest_of(invocation)
    key = f"tr:{tenant}:i:{digest_of(under or invocation).ref.key}"
    return [key.encode(), encode_values(invocation, digest.sha256, digest.size, 512), TTL]


def export_file(tenant: str | None, items: list[list[Any]]) -> bytes:
    packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack({"toolrefExport": 1, "tenant": tenant, "created": 0})
    body += b"".join(packer.pack(item) for item in items)
    return zstandard.ZstdCompressor().compress(body)


@contextmanager
def sync(url: str) -> Iterator[SyncRedis]:
    client = SyncRedis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def altered(item: list[Any]) -> list[Any]:
    """The same item with its payload changed under its digest header."""
    rec = record.decode(item[1])
    data = record.encode(
        rec.name,
        is_error=rec.is_error,
        payload=type(rec.payload)(rec.payload.args, '"x = 2\\n"'),
        digest=rec.digest,
        size=rec.size,
        compress_threshold=512,
    )
    return [item[0], data, item[2]]


def message_item(tenant: str, text: str) -> list[Any]:
    """A history message as 0.2 exported it (histories were retired in 0.3)."""
    ident = hashlib.sha256(text.encode()).digest()[:16]
    key = f"tr:{tenant}:m:{digest_key(ident)}"
    return [key.encode(), zstandard.ZstdCompressor().compress(text.encode()), TTL]


# name -> (header tenant, items, what the refusal names)
BAD: dict[str, tuple[str | None, list[list[Any]], str]] = {
    "planted-under-another-tenant": (
        "acme",
        [record_item("acme", GOOD), record_item("globex", EVIL, under=GOOD)],
        "under tenant 'globex', but the file is an export of tenant 'acme'",
    ),
    "planted-under-another-ref": (
        "acme",
        [record_item("acme", GOOD), record_item("acme", EVIL, under=GOOD)],
        "not the invocation its ref names",
    ),
    "planted-in-an-all-tenant-file": (
        None,
        [record_item("acme", GOOD), record_item("globex", EVIL, under=GOOD)],
        "not the invocation its ref names",
    ),
    "payload-altered": ("acme", [altered(record_item("acme", GOOD))], "not the invocation"),
    "record-garbage": (
        "acme",
        [[record_item("acme", GOOD)[0], b"\x02" + b"\x00" * 40, TTL]],
        "not the invocation",
    ),
    "malformed-ref": ("acme", [[b"tr:acme:i:0000", b"x", TTL]], "ref is malformed"),
    # Histories were retired in 0.3: a 0.2 export's history items are of no kind 0.3 keeps.
    "a-history-message": (
        "acme",
        [message_item("acme", '{"role":"user","content":"hi"}')],
        "kind 'm'",
    ),
    "a-history-node": (
        "acme",
        [[b"tr:acme:h:" + b"a" * 26, b"openai-chat\0" + b"x" * 16, TTL]],
        "kind 'h'",
    ),
    # Recipes are never exported (a client resends what a registry lacks).
    "a-recipe-node": ("acme", [[b"tr:acme:b:" + b"a" * 26, b"x", TTL]], "kind 'b'"),
    "a-piece": ("acme", [[b"tr:acme:p:" + b"a" * 22, b"x", TTL]], "kind 'p'"),
    "summary-over-budget": (
        "acme",
        [[f"tr:acme:s:{digest_of(GOOD).ref.key}:extractive:v1:40".encode(), b"y" * 41, TTL]],
        "over its budget of 40",
    ),
    "stand-in-over-the-longest": (
        "acme",
        [
            [
                f"tr:acme:s:{digest_of(GOOD).ref.key}:{PINNED}extractive:200".encode(),
                b"y" * (longest_pinned(200) + 1),
                TTL,
            ]
        ],
        f"over the {longest_pinned(200)} any stand-in",
    ),
    "summary-not-utf8": (
        "acme",
        [[f"tr:acme:s:{digest_of(GOOD).ref.key}:extractive:v1:400".encode(), b"\xff", TTL]],
        "not UTF-8",
    ),
    "a-lock": (
        "acme",
        [[f"tr:acme:s:{digest_of(GOOD).ref.key}:extractive:v1:400:lock".encode(), b"t", TTL]],
        "not `<ref>:<summarizer id>`",
    ),
    "a-quota-counter": ("acme", [[b"tr:acme:q:29000000", b"1", TTL]], "kind 'q'"),
    "foreign-key": ("acme", [[b"session:42", b"x", TTL]], "not `tr:<tenant>:<kind>:...`"),
    "zero-ttl": ("acme", [[*record_item("acme", GOOD)[:2], 0]], "lifetime of 0"),
    "not-an-item": ("acme", [[b"tr:acme:i:x", b"x"]], "not a [key, value, ttl] item"),
}


@pytest.mark.parametrize("case", list(BAD))
async def test_a_bad_item_refuses_the_whole_file_and_writes_nothing(
    redis: Redis, engine_url: str, case: str
) -> None:
    tenant, bad, named = BAD[case]
    # 1000 good items first (two write pages before): all must stay unwritten.
    good = [record_item(tenant or "acme", {**GOOD, "result": f"line {n}\n"}) for n in range(1000)]
    data = export_file(tenant, [*good, *bad])
    before = await snapshot(redis)
    with sync(engine_url) as target, pytest.raises(ValidationError) as refused:
        export.import_(target, io.BytesIO(data))
    assert await snapshot(redis) == before  # nothing written
    detail = refused.value.detail
    assert f"item {1000 + len(bad)}" in detail, detail  # the bad one (last), counted from 1
    assert named in detail, detail
    assert "nothing was imported" in detail
    assert "make it again" in detail or "make the file again" in detail.lower()


async def test_a_file_cut_short_writes_nothing(redis: Redis, engine_url: str) -> None:
    items = [record_item("acme", {**GOOD, "result": f"line {n}\n"}) for n in range(2000)]
    data = export_file("acme", items)
    with sync(engine_url) as target, pytest.raises(ValidationError, match="to its end"):
        export.import_(target, io.BytesIO(data[: len(data) * 2 // 3]))
    assert await snapshot(redis) == {}


async def test_a_file_whose_last_item_is_cut_writes_nothing(redis: Redis, engine_url: str) -> None:
    packer = msgpack.Packer(use_bin_type=True)
    body = packer.pack({"toolrefExport": 1, "tenant": "acme", "created": 0})
    body += packer.pack(record_item("acme", GOOD))[:-5]
    with sync(engine_url) as target, pytest.raises(ValidationError, match="part of an item"):
        export.import_(target, io.BytesIO(zstandard.ZstdCompressor().compress(body)))
    assert await snapshot(redis) == {}


async def test_tenant_option_refuses_another_tenants_file(redis: Redis, engine_url: str) -> None:
    data = export_file("acme", [record_item("acme", GOOD)])
    with sync(engine_url) as target, pytest.raises(ValidationError, match="not of 'globex'"):
        export.import_(target, io.BytesIO(data), tenant="globex")
    all_tenants = export_file(None, [record_item("acme", GOOD)])
    with sync(engine_url) as target, pytest.raises(ValidationError, match="tenant 'globex'"):
        export.import_(target, io.BytesIO(all_tenants), tenant="globex")
    assert await snapshot(redis) == {}


async def test_imported_keys_live_at_most_the_registrys_ttl(redis: Redis, engine_url: str) -> None:
    """Found: import gave each key the lifetime its file named: -1 (a key without expiry,
    which `volatile-lru` never evicts and the stored-bytes quota counts once at most) or ten
    years. Now every key lives at most TOOLREF_TTL_SECONDS, one without a lifetime that."""
    lifetimes = [-1, 10 * 365 * 86_400_000, 60_000]
    items = [
        [*record_item("acme", {**GOOD, "result": f"line {n}\n"})[:2], ttl]
        for n, ttl in enumerate(lifetimes)
    ]
    with sync(engine_url) as target:
        limits = export.Limits(ttl_seconds=3_600)
        assert export.import_(target, io.BytesIO(export_file("acme", items)), limits=limits) == (
            3,
            0,
        )
    left = [await redis.pttl(item[0]) for item in items]
    assert all(0 < ms <= 3_600_000 for ms in left), left
    assert left[2] <= 60_000  # a shorter lifetime is kept as it is
    assert left[0] > 3_500_000  # none: the whole TTL


def big_record(tenant: str, size: int) -> list[Any]:
    """A true record (it holds what its ref names) whose result is `size` zeros: a few KB
    stored, `size` bytes once inflated."""
    return record_item(tenant, {**GOOD, "result": "0" * size})


async def test_a_record_past_the_inflated_limit_is_refused_before_it_is_inflated(
    redis: Redis, engine_url: str
) -> None:
    """Found: a record of any size was checked and written (items up to 256 MiB, a fixed
    limit, and their zstd bodies inflated whole to be checked): a 20 KB item of a true
    record held 16 MiB once inflated, which import inflated, wrote, and the service then
    read back whole. Now a record larger than TOOLREF_MAX_DECOMPRESSED_BYTES (no request
    within it could have made it) refuses the file, by the size its frame declares,
    before anything is inflated or written."""
    item = big_record("acme", 16 << 20)
    assert len(item[1]) < 64 << 10
    data = export_file("acme", [record_item("acme", GOOD), item])
    limits = export.Limits(max_bytes=1 << 20)
    tracemalloc.start()
    try:
        with sync(engine_url) as target, pytest.raises(ValidationError) as refused:
            export.import_(target, io.BytesIO(data), limits=limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert await snapshot(redis) == {}
    detail = refused.value.detail
    assert "item 2" in detail, detail
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in detail, detail
    assert str(1 << 20) in detail, detail
    assert peak < 4 << 20, peak  # not the 16 MiB
    # An item larger than the limit as it is stored is refused as it is read.
    raw = [item[0], b"\x03" + b"x" * (2 << 20), TTL]
    with sync(engine_url) as target, pytest.raises(ValidationError) as refused:
        export.import_(target, io.BytesIO(export_file("acme", [raw])), limits=limits)
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES" in refused.value.detail, refused.value.detail
    assert await snapshot(redis) == {}


class FailingAfter:
    """A client whose pipelines fail (the engine gone) once `pages` of them ran."""

    def __init__(self, client: SyncRedis, pages: int) -> None:
        self.client, self.pages = client, pages

    def pipeline(self, **options: Any) -> Any:
        pipe = self.client.pipeline(**options)
        if self.pages <= 0:
            pipe.execute = self._gone  # type: ignore[method-assign,assignment]
        self.pages -= 1
        return pipe

    @staticmethod
    def _gone(*_: Any) -> Any:
        raise RedisConnectionError("Connection closed by server.")


async def test_an_engine_lost_mid_import_says_what_was_written_and_the_rerun_completes(
    redis: Redis, engine_url: str
) -> None:
    """Found: an engine lost between two pages of writes left the first pages written and
    surfaced as the engine's own error (the CLI: "the engine is unreachable; check
    --redis-url"), without a word of the part imported. Now it is a StoreUnavailableError
    saying how many keys were imported and that the same import, run again, writes the
    rest (it writes only what is absent)."""
    items = [record_item("acme", {**GOOD, "result": f"line {n}\n"}) for n in range(1200)]
    data = export_file("acme", items)
    with sync(engine_url) as target, pytest.raises(StoreUnavailableError) as lost:
        export.import_(FailingAfter(target, 1), io.BytesIO(data))  # type: ignore[arg-type]
    detail = lost.value.detail
    assert "500 of the file's 1200 keys" in detail, detail
    assert "run the same import again" in detail, detail
    assert len(await snapshot(redis)) == 500
    with sync(engine_url) as target:
        assert export.import_(target, io.BytesIO(data)) == (700, 500)
    assert len(await snapshot(redis)) == 1200


class Stdin(io.RawIOBase):
    """A stream that reads once and cannot seek, as a pipe."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


async def test_a_real_export_passes_every_check_and_round_trips(
    make_api: Api, redis: Redis, engine_url: str
) -> None:
    """The control: records and summaries, exported by the service's own command, import
    whole (from a file and from a pipe) and read back the same; the recipes of edited
    requests kept beside them are not exported."""
    api = await make_api()
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n" * 200},
        {"role": "assistant", "content": "ok"},
    ]
    hydrated = await api.post("/v1/messages:hydrate", json={"messages": messages})
    ref = hydrated.json()["toolReferences"]["c1"]
    assert (await api.get(f"/v1/invocations/{ref}/summary")).status_code == 200
    body = json.dumps({"model": "m", "messages": messages}).encode()
    edit = Editor().prepare([("content-type", "application/json")], body, "messages")
    assert edit is not None
    applied = await api.post("/v1/edits:apply", content=edit.body, headers={"Content-Type": EDIT})
    assert applied.status_code == 200, applied.text
    held = await snapshot(redis)
    assert {k.decode().split(":")[2] for k in held} == {"i", "s", "b", "k"}
    before = {k: v for k, v in held.items() if k.decode().split(":")[2] in ("i", "s")}
    with sync(engine_url) as source:
        out = io.BytesIO()
        count = export.export(source, out, "local")
    assert count == len(before)
    for stream in (io.BytesIO(out.getvalue()), io.BufferedReader(Stdin(out.getvalue()))):
        await redis.flushall()
        with sync(engine_url) as target:
            assert export.import_(target, stream) == (count, 0)
        after = await snapshot(redis)
        assert after == before
    marked = [messages[0], *with_marker(ref), messages[3]]
    again = await api.post("/v1/messages:hydrate", json={"messages": marked})
    assert again.status_code == 200, again.text
    assert again.json()["messages"] == messages


def with_marker(ref: str) -> list[dict[str, Any]]:
    """The call and result of `messages` as a marker (the payloads held under `ref`)."""
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "toolRef": ref}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "toolRef": ref},
    ]


def test_the_cli_names_the_bad_item_and_exits_2(tmp_path: Path) -> None:
    tenant, bad, named = BAD["planted-under-another-tenant"]
    crafted = tmp_path / "crafted.trx"
    crafted.write_bytes(export_file(tenant, bad))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolref_server.cli",
            "cache",
            "import",
            str(crafted),
            "--redis-url",
            "redis://127.0.0.1:1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "item 2" in done.stderr
    assert named in done.stderr
    assert "nothing was imported" in done.stderr


def test_the_cli_holds_records_to_the_registrys_inflated_limit(tmp_path: Path) -> None:
    """`cache import` reads its limits from the settings, as `serve` does."""
    crafted = tmp_path / "large.trx"
    crafted.write_bytes(export_file("acme", [big_record("acme", 2 << 20)]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolref_server.cli",
            "cache",
            "import",
            str(crafted),
            "--redis-url",
            "redis://127.0.0.1:1",
        ],
        cwd=ROOT,
        env={**clean_env(), "TOOLREF_MAX_DECOMPRESSED_BYTES": str(1 << 20)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "TOOLREF_MAX_DECOMPRESSED_BYTES (1048576)" in done.stderr
    assert "nothing was imported" in done.stderr


class RewrittenAfterCheck(io.BytesIO):
    """A file that another process rewrites once import has checked it: what the second
    read (the one that writes) finds is `later`."""

    def __init__(self, first: bytes, later: bytes) -> None:
        super().__init__(first)
        self._later: bytes | None = later

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self._later is not None and self.tell() > 0:  # read once: rewritten now
            later, self._later = self._later, None
            self.truncate(0)
            super().seek(0)
            self.write(later)
        return super().seek(offset, whence)


async def test_a_file_changed_after_its_check_writes_nothing_unchecked(
    redis: Redis, engine_url: str
) -> None:
    """Found: import checked the file on its first read, and wrote what its second read
    found without checking it: a file rewritten in between (by whoever could write it, while
    a long check ran) planted a payload under another tenant's ref, though `--tenant acme`
    and the file's header held the import to acme. Now every item is checked again as it is
    written: the changed one is refused, naming it, and the keys written before it (each
    checked) are counted."""
    good = [record_item("acme", {**GOOD, "result": f"line {n}\n"}) for n in range(600)]
    first = export_file("acme", good)
    later = export_file("acme", [*good, record_item("globex", EVIL, under=GOOD)])
    with sync(engine_url) as target, pytest.raises(ValidationError) as refused:
        export.import_(target, RewrittenAfterCheck(first, later), tenant="acme")
    held = await snapshot(redis)
    assert not [key for key in held if ":globex:" in str(key)], held
    assert len(held) == 500  # the first page, checked twice
    detail = refused.value.detail
    assert "item 601" in detail, detail
    assert "under tenant 'globex'" in detail, detail
    assert "changed since it was checked" in detail, detail
    assert "500 keys were imported before it" in detail, detail


async def test_a_file_spoilt_after_its_check_says_what_was_imported(
    redis: Redis, engine_url: str
) -> None:
    """Found: a file that could no longer be read to its end after its check (rewritten
    meanwhile) stopped the writes midway with "nothing was imported", though pages of keys
    were."""
    good = [record_item("acme", {**GOOD, "result": f"line {n}\n"}) for n in range(1200)]
    first = export_file("acme", good)
    with sync(engine_url) as target, pytest.raises(ValidationError) as refused:
        export.import_(target, RewrittenAfterCheck(first, first + b"\x00" * 16))
    written = len(await snapshot(redis))
    assert written == 1000, written  # two pages
    detail = refused.value.detail
    assert "nothing was imported" not in detail, detail
    assert "cannot be read to its end" in detail, detail
    assert f"{written} keys were imported before it" in detail, detail


def test_a_file_that_inflates_a_thousandfold_is_read_in_small_steps() -> None:
    """Found: the check fed zstd 4 KiB of the file at a time, and 4 KiB of run-length blocks
    (4 bytes each, 128 KiB once inflated) inflate to 128 MiB in one step: a file of a few KB
    made import hold that much at once, 8 times the bound its docstring said. Now at most
    512 bytes are fed at a time: 16 MiB at most, whatever the file."""
    packer = msgpack.Packer(use_bin_type=True)
    header = packer.pack({"toolrefExport": 1, "tenant": "acme", "created": 0})
    data = zstandard.ZstdCompressor().compress(header + b"\x00" * (256 << 20))
    assert len(data) < 16 << 10
    tracemalloc.start()
    try:
        with pytest.raises(ValidationError, match="not a \\[key, value, ttl\\] item"):
            export.verify(io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, peak
