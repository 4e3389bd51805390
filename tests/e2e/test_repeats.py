"""The same prompt run again and again through one relay keeps its savings (issue 31 item 5:
with history refs, turns 2-3 of a repeated `claude -p` cost 26.5 KB, 3.3x, on every repeat;
now each turn of a repeat is an edit of the run before, so even a repeat's first turn costs
what a continuation turn costs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.test_agents import installed, turn_posts
from tests.support import agents
from tests.support.agents import CLIS
from tests.support.chain import Chain
from tests.support.fake_provider import FINAL_TEXT, FakeProvider, Script
from tests.support.servers import serve

pytestmark = pytest.mark.e2e

CALLS = 4
RUNS = 3


@pytest.mark.parametrize("name", ["claude", "codex"])
async def test_a_repeated_session_costs_what_continuation_turns_cost(
    name: str, tmp_path: Path, chain: Chain
) -> None:
    cli = installed(CLIS[name])
    workdir, home = tmp_path / "work", tmp_path / "home"
    fake = FakeProvider(Script(CALLS, workdir))
    runs: list[list[int]] = []
    async with serve(fake.app) as fake_url, chain(fake_url) as hops:
        if hops.chain != "relay":
            pytest.skip("savings are the relay's: this runs on the relay chain only")
        to_gateway = hops.hops[1]
        for _ in range(RUNS):
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            before = len(turn_posts(to_gateway.requests))
            run = await agents.run(cli, hops.base, workdir, home)
            assert run.returncode == 0, run.stderr[-2000:]
            assert FINAL_TEXT in run.stdout
            runs.append([len(r.wire) for r in turn_posts(to_gateway.requests)[before:]])
    first, *repeats = runs
    print(f"\n{name}: relay->gateway bytes per turn, run by run: {runs}")
    continuation = max(first[1:])
    for repeat in repeats:
        assert len(repeat) == len(first)
        # every turn of a repeat within a continuation turn's cost (twice the dearest); its
        # first carries the run's new session headers besides (segment 0, inline; their old
        # version lies outside the window it is compressed against, behind the previous run's
        # later turns, which it removes): within four (continuation turns cost less since the
        # answer is their dictionary, issue 39, and the shipped dictionary, version 7, the
        # first turn of a repeat less so: Claude Code's 194 B and 647 B), and far from what
        # the first run's first cost
        assert max(repeat[1:]) <= 2 * continuation, (runs, continuation)
        assert repeat[0] <= 4 * continuation, (runs, continuation)
        assert repeat[0] * 10 < first[0], runs
