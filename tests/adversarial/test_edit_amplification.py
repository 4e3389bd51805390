"""Edits that cost the gateway what they say, whatever they name (issue 37, H1, H2, L1).

Found (against a real service process):
- H1: an edit's keep ranges were checked against the inflated byte limit only, after the
  recipe's lists were built on the event loop. Empty segments weigh 0 bytes: a 1,706-byte
  edit of 150 keeps `[0, 100001]` over a base of 100,000 empty segments took the service
  from 108 MB to 1.8 GB and held `/healthz` 5.7-8.1 s.
- H2: building a snapshot's slices tested membership in a copied slice on every pass: a
  legal edit alternating kept and new entries, then one keeping the whole range, held the
  loop 80 s (99,999 alternations; 1.1 s for 20,000).
- L1: a header line nested too deep (RecursionError) and an edit with no ops (IndexError)
  answered 500.

Now every edit's entries are counted before anything is built (TOOLREF_MAX_EDIT_ENTRIES,
each entry of a kept range counted), an inline segment is never empty but the headers',
and rechunking is linear. Each attack below is refused at once with a 4xx, or served
while the process grows by less than 300 MB and `/healthz` answers within a second.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final

import httpx
import psutil
import pytest

from tests.support.chain import free_port
from tests.support.processes import Service
from toolref.edits.edit import Inline, Keep, Op
from toolref.edits.recipe import entry_of, recipe_ref
from toolref.edits.wire import MEDIA_TYPE, encode

from .test_server_process import healthz_seconds

pytestmark = [pytest.mark.engine, pytest.mark.latency]

PATH: Final = "/llm/fake/v1/messages"
GROWTH: Final = 300 << 20  # what the issue allows the process to grow by
HEALTHZ: Final = 1.0  # seconds /healthz may take meanwhile


class _Upstream(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # (the stdlib's name)
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = b'{"ok":true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return None


@contextmanager
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with upstream() as url:
        data = tmp_path_factory.mktemp("edits")
        served = Service(Path(data), free_port(), TOOLREF_UPSTREAMS=f"fake={url}")
        try:
            yield served
        finally:
            served.stop()


def post(service: Service, body: bytes, timeout: float = 120) -> httpx.Response:
    return httpx.post(
        service.url + PATH,
        content=body,
        headers={"content-type": MEDIA_TYPE},
        timeout=timeout,
    )


@contextmanager
def watched(service: Service) -> Iterator[dict[str, float]]:
    """The process's RSS growth and the slowest /healthz while the block runs (probed every
    50 ms from a thread, on a fresh connection each time)."""
    process = psutil.Process(service.process.pid)
    seen = {"growth": 0.0, "healthz": 0.0}
    before = process.memory_info().rss
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            seen["healthz"] = max(seen["healthz"], healthz_seconds(service.port))
            seen["growth"] = max(seen["growth"], process.memory_info().rss - before)
            stop.wait(0.05)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        seen["growth"] = max(seen["growth"], process.memory_info().rss - before)


def _first(segments: Sequence[bytes]) -> tuple[bytes, str]:
    """A recipe of no base: the headers' segment (empty) and `segments` inline."""
    ops: list[Op] = [Inline(b""), *(Inline(s) for s in segments)]
    entries = [entry_of(b""), *(entry_of(s) for s in segments)]
    return encode(None, ops, b""), recipe_ref(entries)


def _assert_bounded(seen: dict[str, float]) -> None:
    assert seen["growth"] < GROWTH, f"the service grew by {seen['growth'] / 2**20:.0f} MiB"
    assert seen["healthz"] < HEALTHZ, f"/healthz took {seen['healthz']:.2f} s meanwhile"


@pytest.mark.parametrize(
    ("count", "status", "says"),
    [(100_000, 413, "TOOLREF_MAX_EDIT_ENTRIES"), (1000, 400, "more than 0")],
)
def test_empty_inline_segments_are_refused_at_once(
    service: Service, count: int, status: int, says: str
) -> None:
    """The base of H1: 100,000 empty segments (each weighs nothing) is refused at once,
    and so are a thousand (an empty segment is refused whatever their count), naming the
    fix; nothing is built."""
    with watched(service) as seen:
        body, _ = _first([b""] * count)
        answer = post(service, body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["detail"]
    _assert_bounded(seen)


@pytest.mark.parametrize("keeps", [150, 1000])
def test_keep_ranges_are_counted_in_entries_before_anything_is_built(
    service: Service, keeps: int
) -> None:
    """H1 with one-byte segments (as few bytes as a segment may weigh): the largest base
    the limit allows is served; `keeps` ranges of all of it (a few KB of edit) are a 413
    naming TOOLREF_MAX_EDIT_ENTRIES, at once, before and after the base is held."""
    with watched(service) as seen:
        too_many, _ = _first([b"x"] * 60_000)
        refused = post(service, too_many)
        body, base = _first([b"%d" % (i % 10) for i in range(49_000)])
        kept = post(service, body)
        amplified = encode(base, [Keep(0, 49_001)] * keeps, None)
        answer = post(service, amplified)
        again = post(service, amplified)
    assert refused.status_code == 413, refused.text
    assert kept.status_code == 200, kept.text
    assert kept.headers["toolref-history"] == base
    for each in (answer, again):
        assert each.status_code == 413, each.text
        assert "TOOLREF_MAX_EDIT_ENTRIES" in each.json()["detail"]
    assert len(amplified) < 20 * keeps
    _assert_bounded(seen)


def test_alternating_kept_and_new_entries_then_the_whole_range_is_linear(
    service: Service,
) -> None:
    """H2 within the limit: an edit alternating kept and new entries 24,000 times, then
    one keeping its whole range (a snapshot's rechunking over 48,000 slices): both served,
    the loop free meanwhile."""
    segments = [b"base %05d" % i for i in range(24_000)]
    first, base = _first(segments)
    assert post(service, first).status_code == 200
    ops: list[Op] = [Keep(0, 1)]
    entries = [entry_of(b"")]
    for i in range(24_000):
        new = b"new %05d" % i
        ops += [Keep(i + 1, i + 2), Inline(new)]
        entries += [entry_of(segments[i]), entry_of(new)]
    alternating = encode(base, ops, None)
    middle = recipe_ref(entries)
    with watched(service) as seen:
        answer = post(service, alternating)
        assert answer.status_code == 200, answer.text
        assert answer.headers["toolref-history"] == middle
        for _ in range(10):  # past a snapshot (TOOLREF_EDIT_SNAPSHOT_EVERY, 8)
            whole = encode(middle, [Keep(0, len(entries))], None)
            kept = post(service, whole)
            assert kept.status_code == 200, kept.text
    _assert_bounded(seen)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'{"v":1,"b":null,"o":' + b"[" * 5000 + b"]" * 5000 + b',"n":0}', "not JSON"),
        (b'{"v":1,"b":null,"o":[],"n":0}', "headers' segment first"),
        (b'{"v":1,"b":null,"o":[[1,1]],"n":0}', "start < end"),
    ],
)
def test_malformed_edits_are_a_400_with_the_fix(service: Service, line: bytes, says: str) -> None:
    """L1: what answered 500 (a RecursionError, an IndexError) is a 400 naming the fix."""
    answer = post(service, line + b"\n", timeout=30)
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert says in problem["detail"], problem
    assert "toolref.edits.wire.encode" in problem["detail"]


def test_an_edit_past_the_limit_changes_nothing_stored(service: Service) -> None:
    """A refused edit stores nothing: the base it would have made is not held after."""
    body, ref = _first([b"y"] * 60_000)
    assert post(service, body).status_code == 413
    follow = encode(ref, [Keep(0, 1)], None)
    answer = post(service, follow)
    assert answer.status_code == 409, answer.text
    assert json.loads(answer.text)["type"].endswith("missing-history")
