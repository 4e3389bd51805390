"""aider (PyPI `aider-chat`, through litellm) through a session of edits against the fake
provider: it writes each file the model lists, runs its test command (`sh check.sh`) after
each edit and sends the failing output back, three times, then the model's final text.

aider calls no tools: it edits by text (`--edit-format whole`), and its tool loop is the
test command's output reflected back to the model (at most 3 times a message). The session
runs on both of its paths, through the chain `make e2e` picks (tests/e2e/conftest.py): the
OpenAI one (`OPENAI_API_BASE`, Chat Completions) and the Anthropic one
(`ANTHROPIC_API_BASE`, Messages).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.isolate import FLAG
from tests.e2e.test_agents import canonical, diagnostics, installed, report, turn_posts
from tests.support import agents
from tests.support.agents import AIDER, AIDER_ANTHROPIC, Cli
from tests.support.chain import UPSTREAM, Chain, Hops
from tests.support.fake_provider import (
    FINAL_TEXT,
    TEST_SCRIPT,
    EditScript,
    FakeProvider,
    edit_line,
    marker,
    run_markers,
    step_file,
)
from tests.support.servers import serve

pytestmark = pytest.mark.e2e

EDITS = 3  # aider reflects a failing test's output at most 3 times per message
PROMPT = "Write the scripted step files, one at a time."
TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Session:
    hops: Hops
    fake: FakeProvider
    run: agents.Run


async def session(cli: Cli, tmp_path: Path, chain: Chain) -> Session:
    """One aider session, checked to its end: each edit written to disk, tested, its
    failing output sent back, then the final text; the provider got the JSON aider sent."""
    cli = installed(cli)
    workdir, home = tmp_path / "work", tmp_path / "home"
    workdir.mkdir()
    (workdir / "check.sh").write_text(TEST_SCRIPT)
    fake = FakeProvider(EditScript(EDITS), dump=tmp_path / "requests")
    async with serve(fake.app) as fake_url, chain(fake_url) as hops:
        run = await agents.run(cli, hops.base, workdir, home, PROMPT, TIMEOUT)
    data = report(cli, hops, fake, run)
    sizes = [t["wire_bytes"] for t in data["turns"]]
    print(
        f"\n{cli.name} {cli.version} via {hops.chain}: exit {run.returncode} in "
        f"{run.seconds:.1f} s, isolated={data['isolated']}, {len(sizes)} turns, "
        f"request bytes {sizes}"
    )
    if os.environ.get(FLAG) != "1":
        print(f"note: {cli.name} ran without network isolation (not under tests/e2e/isolate.py)")

    assert run.returncode == 0, diagnostics(run, fake)
    assert FINAL_TEXT in run.stdout, diagnostics(run, fake)
    turns = fake.turns(cli.api)
    answers = [r.answer for r in turns]
    expected = [f"edit:{step_file(workdir, k).name}" for k in range(EDITS)] + ["text"]
    assert answers == expected, diagnostics(run, fake)
    for k in range(EDITS):
        assert step_file(workdir, k).read_text().strip() == edit_line(k)
    # Turn k carries the shell's output of the k test runs before it (the conversation
    # resent whole each time).
    for k, record in enumerate(turns):
        assert run_markers(cli.api, record.json()) == [marker(j) for j in range(k)]

    # The provider got the JSON aider sent, keys in the same order, on the same paths.
    sent, got = turn_posts(hops.first.requests), turn_posts(fake.requests)
    assert sorted(canonical(r.body) for r in sent) == sorted(canonical(r.body) for r in got)
    prefix = f"/llm/{UPSTREAM}" if hops.chain == "relay" else ""
    assert sorted(r.path.removeprefix(prefix) for r in sent) == sorted(r.path for r in got)
    return Session(hops, fake, run)


def same_bytes(done: Session) -> bool:
    sent, got = turn_posts(done.hops.first.requests), turn_posts(done.fake.requests)
    return sorted(r.body for r in sent) == sorted(r.body for r in got)


async def test_aider_openai_session(tmp_path: Path, chain: Chain) -> None:
    """Its OpenAI path: the provider gets aider's bytes exactly (the openai SDK writes
    compact JSON), and each turn after the first costs the relay less than aider sent."""
    done = await session(AIDER, tmp_path, chain)
    assert same_bytes(done)
    if done.hops.chain == "relay":
        sent = turn_posts(done.hops.first.requests)
        relayed = turn_posts(done.hops.hops[1].requests)
        per_turn = [(len(a.wire), len(r.wire)) for a, r in zip(sent, relayed, strict=True)]
        agent_bytes, relay_bytes = sum(a for a, _ in per_turn), sum(r for _, r in per_turn)
        print(
            f"aider: the agent sent {agent_bytes} bytes, the relay {relay_bytes}: "
            f"{agent_bytes / relay_bytes:.1f}x (agent, relay->gateway bytes per turn: "
            f"{per_turn})"
        )
        assert all(r < a for a, r in per_turn[1:]), per_turn


async def test_aider_anthropic_session(tmp_path: Path, chain: Chain) -> None:
    """Its Anthropic path (`ANTHROPIC_API_BASE`, litellm's own Messages client):
    completes, the provider gets the same JSON."""
    await session(AIDER_ANTHROPIC, tmp_path, chain)


async def test_aider_anthropic_bytes_reach_the_provider_exactly(
    tmp_path: Path, chain: Chain
) -> None:
    """The provider receives the bytes aider sent, its spaced separators included (issue 31
    item 3: litellm's Anthropic path writes ', ' and ': ', which relay and gateway used to
    re-serialize compact; edits carry the agent's own text)."""
    done = await session(AIDER_ANTHROPIC, tmp_path, chain)
    assert same_bytes(done)
