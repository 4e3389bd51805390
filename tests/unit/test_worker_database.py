"""`make test`'s workers on one TOOLREF_TEST_REDIS_URL: each flushes a database of its own."""

from __future__ import annotations

import pytest

from tests.conftest import worker_database


def workers(monkeypatch: pytest.MonkeyPatch, worker: str, count: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)


def test_each_worker_gets_the_database_after_the_given_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers(monkeypatch, "gw1", "2")
    assert worker_database("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379/1"
    assert worker_database("redis://:pw@host:6380/3?x=1") == "redis://:pw@host:6380/4?x=1"
    workers(monkeypatch, "gw0", "2")
    assert worker_database("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"


def test_one_worker_or_none_keeps_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    workers(monkeypatch, "gw0", "1")
    assert worker_database("redis://h:1/5") == "redis://h:1/5"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert worker_database("redis://h:1/5") == "redis://h:1/5"


def test_a_cluster_on_several_workers_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers(monkeypatch, "gw1", "2")
    with pytest.raises(pytest.fail.Exception, match="TEST_WORKERS=1"):
        worker_database("redis+cluster://127.0.0.1:7000")
