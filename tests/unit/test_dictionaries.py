"""Records and history messages with shipped zstd dictionaries: versions, ids, settings, and
what the dictionaries hold."""

from __future__ import annotations

import json
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pydantic
import pytest
import zstandard

from tests.support.records import encode_values
from toolref.wire import dictionaries
from toolref.wire.canonical import Ref, digest_of
from toolref.wire.encoding import dumps_json
from toolref_server.settings import Settings
from toolref_server.storage import compressors, record

from ..conftest import SHARED, need

ROOT = Path(__file__).resolve().parents[2]
INVOCATION = {
    "name": "bash",
    "args": {"command": "ls -la src"},
    "result": "total 8\ndrwxr-xr-x 2 user user 4096 Jan  1 10:00 .\n" * 20,
    "isError": False,
}
DIGEST = digest_of(INVOCATION)


@pytest.fixture(autouse=True)
def _writing() -> Iterator[None]:
    """Each test starts from, and leaves, the default writing choice."""
    before = compressors.writing
    compressors.configure(records=1, messages=1, level=3)
    yield
    compressors.writing = before


def frame_dictionary(data: bytes) -> int:
    return int(zstandard.get_frame_parameters(data[record.DIGEST_END + 1 :]).dict_id)


def test_every_shipped_dictionary_loads_from_the_package_with_its_id() -> None:
    for shipped in dictionaries.SHIPPED:
        loaded = dictionaries.by_id(shipped.dict_id)
        assert loaded is not None
        assert loaded.dict_id() == shipped.dict_id
        assert 32_768 <= shipped.dict_id < 2**31  # zstd's private range
    # The wheel carries them: package data names the files.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["toolref"]
    folder = ROOT / "client_sdk" / "toolref"
    shipped_files = {p for pattern in patterns for p in folder.glob(pattern)}
    for shipped in dictionaries.SHIPPED:
        assert folder / "wire" / "dictionaries" / shipped.file in shipped_files


def test_a_new_record_names_its_dictionary_and_decodes() -> None:
    data = encode_values(INVOCATION, DIGEST.sha256, DIGEST.size, 64)
    assert data[0] == 3
    assert data[record.DIGEST_START : record.DIGEST_END] == DIGEST.sha256
    assert frame_dictionary(data) == dictionaries.BASES["records"] + 1
    assert record.verified(data, DIGEST.ref) is not None
    assert record.decode(data).invocation() == INVOCATION
    # Smaller than without the dictionary.
    compressors.configure(records=0, messages=1, level=3)
    plain = encode_values(INVOCATION, DIGEST.sha256, DIGEST.size, 64)
    assert frame_dictionary(plain) == 0
    assert record.decode(plain).invocation() == INVOCATION
    assert len(data) < len(plain)


def _old(version: int, fields: dict[str, object], compressed: bool) -> bytes:
    body: bytes = msgpack.packb(fields, use_bin_type=True)
    if compressed:
        body = zstandard.ZstdCompressor(level=3).compress(body)
    return bytes((version,)) + DIGEST.sha256 + bytes((int(compressed),)) + body


@pytest.mark.parametrize("compressed", [False, True])
def test_version_1_and_2_records_still_decode(compressed: bool) -> None:
    now = int(time.time())
    payloads = {"args": '{"command":"ls -la src"}', "result": json.dumps(INVOCATION["result"])}
    v2 = _old(
        2,
        {"name": "bash", "err": False, **payloads, "size": DIGEST.size, "created": now},
        compressed,
    )
    v1 = _old(1, {"inv": INVOCATION, "size": DIGEST.size, "created": now}, compressed)
    for data in (v1, v2):
        rec = record.verified(data, DIGEST.ref)
        assert rec is not None
        assert rec.invocation() == INVOCATION
        assert rec.created == now


def test_a_record_of_an_unknown_dictionary_is_corrupt_never_served() -> None:
    # A dictionary a newer version would ship: same kind, next id.
    unknown = zstandard.train_dictionary(
        4096, [dumps_json({"n": n, "text": "x" * (n % 50)}) for n in range(400)], dict_id=0x74720063
    )
    body = record.body("bash", False, record.payload_of(INVOCATION), DIGEST.size, 1)
    packed = zstandard.ZstdCompressor(level=3, dict_data=unknown).compress(body)
    data = bytes((3,)) + DIGEST.sha256 + b"\x01" + packed
    with pytest.raises(record.UnknownDictionaryError, match="1953628259"):
        record.decode(data)
    assert record.verified(data, DIGEST.ref) is None
    # The same bytes with the dictionary shipped would be read: the id alone decides.
    assert isinstance(record.UnknownDictionaryError("x"), record.CorruptRecordError)


def test_a_history_message_names_the_messages_dictionary() -> None:
    text = b'{"role":"assistant","content":"Let me read the file."}'
    packed = compressors.compress(text, "messages")
    assert zstandard.get_frame_parameters(packed).dict_id == dictionaries.BASES["messages"] + 1
    assert compressors.decompress(packed) == text
    with pytest.raises(compressors.UnknownDictionaryError, match="does not ship"):
        compressors.decompress(packed[:5] + b"\x00" + packed[6:])  # another id


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("TOOLREF_RECORD_DICTIONARY", "7", "no records dictionary 7 ships with this version"),
        ("TOOLREF_MESSAGE_DICTIONARY", "9", "no messages dictionary 9 ships"),
        ("TOOLREF_RECORD_DICTIONARY", "-1", "greater than or equal to 0"),
        ("TOOLREF_COMPRESS_LEVEL", "23", "less than or equal to 22"),
        ("TOOLREF_EDIT_SUPERSEDED_TTL", "0", "greater than or equal to 1"),
    ],
)
def test_memory_settings_are_checked(
    monkeypatch: pytest.MonkeyPatch, setting: str, value: str, message: str
) -> None:
    monkeypatch.setenv(setting, value)
    with pytest.raises(pydantic.ValidationError, match=message):
        Settings()


def test_writing_without_dictionaries_is_a_setting() -> None:
    settings = Settings(record_dictionary=0, message_dictionary=0, compress_level=9)
    assert (settings.record_dictionary, settings.message_dictionary) == (0, 0)
    with pytest.raises(ValueError, match="no records dictionary 5"):
        compressors.configure(records=5, messages=1, level=3)


@pytest.mark.shared
def test_the_dictionaries_hold_no_shared_trace_text() -> None:
    """Every 64-byte run a shipped dictionary shares with the shared traces comes from the
    neutral corpus it was trained on (generic tool banners, JSON envelopes), and no name
    particular to the traces is in it."""
    traces = SHARED / "traces"
    if not traces.is_dir():
        need(f"the shared traces are not at {traces}")
    from loadtests import dictionaries as corpus

    try:
        subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", corpus.TRAINED_AT], check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        need(f"commit {corpus.TRAINED_AT} (the training corpus) is not in this clone")
    texts = []
    for path in sorted(traces.glob("*.json")):
        data = json.loads(path.read_text())
        for conversation in data.get("conversations", [data]):
            for message in conversation["messages"]:
                texts.append(json.dumps(message, ensure_ascii=False).encode())
                texts.append(json.dumps(message).encode())
    blob = b"\n".join(texts)
    src = corpus.source(corpus.TRAINED_AT)
    made = b"\n".join([*corpus.record_samples(src), *corpus.message_samples(src)])
    width = 64
    for shipped in dictionaries.SHIPPED:
        content = dictionaries.data(shipped)
        for name in (b"django", b"marshmallow", b"ponylang", b"sophia", b"testbed", b"tau-bench"):
            assert name not in content.lower(), (shipped.file, name)
        runs = {content[i : i + width] for i in range(len(content) - width)}
        shared = {blob[i : i + width] for i in range(len(blob) - width)} & runs
        strays = [run for run in shared if run not in made]
        assert not strays, (shipped.file, strays[:3])


def test_a_ref_keeps_naming_the_record() -> None:
    """The digest stays at its fixed offset, so the GETRANGE collision check reads it."""
    data = encode_values(INVOCATION, DIGEST.sha256, DIGEST.size, 0)
    assert data[record.DIGEST_START : record.DIGEST_END] == DIGEST.sha256
    assert record.verified(data, Ref(str(DIGEST.ref))) is not None
