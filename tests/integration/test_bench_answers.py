"""The answers benchmark replays a conversation through the real middleware and registry."""

from __future__ import annotations

import asyncio

import pytest
from loadtests import answers

from ..unit.test_bench import small_trace

pytestmark = pytest.mark.engine


def test_answers_are_counted_bare_and_with_toolref(engine_url: str) -> None:
    if engine_url.startswith("redis+cluster"):
        pytest.skip("the benchmark runs on one node; the cluster pass covers the middleware")
    bare, edits = asyncio.run(answers._replay(engine_url, small_trace()))
    assert bare > 0
    # Toolref's answers carry the same bodies plus a few headers (the recipe kept, that the
    # backend reads edits, what the request saved), never anything per message.
    assert bare < edits <= answers.TARGET * bare
