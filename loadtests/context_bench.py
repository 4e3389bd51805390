"""Context editing (issue 41): the model's input, in tokens and in prompt-cache-priced cost,
with old tool results replaced by their summaries, against the same conversation direct.

Every shared trace of `MIN_TURNS` turns or more is replayed turn by turn as its agent sends
it (each turn the whole conversation so far) through `toolref relay --context-editing` and
`toolref-server serve` (one worker, its own embedded engine, the default policy) to an
upstream in this process that records every body it gets. A second relay, without the
flag, sends the same turns through the same gateway: the provider gets them as the agent
wrote them (direct), and the gateway's CPU for them is the reference.

Input tokens: bytes / 4 of each body the provider got, summed over the conversation.
Cost: each turn's body priced as prompt caching prices it: the bytes it shares from its
start with the body before it read from the cache (0.1), the rest written (1.25). A
rewrite: a turn on which editing made the provider write more of the body to its cache
than the agent's own turn did (`rewrites`: from the first result a batch replaced on).
Gateway CPU: the service process's, per turn, median over the first and the last `WINDOW`
turns, and its growth (last over first), with editing and without (the two relays' turns
alternate: both see the machine as it ran then); beside them the growth of requests of
constant cost sent after each turn (`CONTROLS`: other work shares these cores, and how
fast they ran moves from minute to minute; 1.0: the machine ran as fast at the end as at
the start).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from loadtests import context_agents, traces
from loadtests.bandwidth import turns_of
from loadtests.context_ceiling import ceiling, cost
from loadtests.gateway_turns import renamed
from loadtests.rawhttp import Connection, request
from loadtests.report import Section, shown
from loadtests.systems import AFTER, UPSTREAM_NAME, Launcher, Proc, free_port
from loadtests.traces import Trace
from toolref.edits.scanner import shared as common_prefix

COMMAND: Final = "python -m loadtests.context_bench"
MIN_TURNS: Final = 100  # the traces judged: as many requests or more (issue 41)
WINDOW: Final = 20  # turns: the first and last, for the gateway's CPU growth
MEDIAN_AT_MOST, EACH_AT_MOST, GROWTH_AT_MOST = 0.6, 0.9, 1.3
PATHS: Final = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions"}
HEADERS: Final = {"content-type": "application/json", "x-api-key": "sk-bench"}
_LENGTH: Final = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_ANSWER: Final = b'{"id":"x","choices":[],"content":[],"type":"message"}'
SLACK: Final = 256  # bytes: a rewrite writes this much more than the agent's own turn
CONTROL_PATH: Final = "/v1/bench-control"  # no LLM endpoint: the gateway passes it on
CONTROL_BODY: Final = b'{"control":"' + b"c" * 16_000 + b'"}'
CONTROLS: Final = 5  # control requests after each turn, their CPU summed


@dataclass
class Recorder:
    """The provider: each body it got, answered at once with a small JSON."""

    bodies: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                found = _LENGTH.search(head)
                body = await reader.readexactly(int(found.group(1))) if found else b""
                if head.startswith(b"POST "):
                    self.bodies.append(body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(_ANSWER)}\r\n\r\n".encode()
                    + _ANSWER
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@dataclass
class Replayed:
    """One conversation through one relay: the bodies the provider got, the gateway's CPU
    per turn, and per turn the gateway's CPU for a request of constant cost (`control`)."""

    bodies: list[bytes] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    control: list[float] = field(default_factory=list)

    def growth(self, window: int) -> tuple[float, float, float]:
        """CPU per turn, median of the first and of the last `window` turns, and how fast
        the machine ran then: the control's last over its first."""
        first, last = statistics.median(self.cpu[:window]), statistics.median(self.cpu[-window:])
        pace = statistics.median(self.control[-window:]) / statistics.median(self.control[:window])
        return first, last, pace


def rewrites(on: list[bytes], off: list[bytes]) -> int:
    """Turns on which editing made the provider write its cache again: more of the body is
    new to the cache (past what it shares with the body before) than of the agent's own
    body (an agent that moves its cache marks rewrites a little every turn itself; `SLACK`
    bytes of that)."""
    count = 0
    pairs = zip(itertools.pairwise(on), itertools.pairwise(off), strict=True)
    for (before, body), (own_before, own) in pairs:
        written = len(body) - common_prefix(before, body)
        count += written > len(own) - common_prefix(own_before, own) + SLACK
    return count


def body_of(fmt: str, messages: list[dict[str, Any]]) -> bytes:
    body: dict[str, Any] = {"model": "scripted-1", "messages": messages}
    if fmt == "anthropic":
        body["max_tokens"] = 1024
    return json.dumps(body, ensure_ascii=False).encode()


async def replay(
    trace: Trace, relays: dict[str, Proc], gateway: Proc, recorder: Recorder
) -> dict[str, Replayed]:
    """`trace` turn by turn through each of `relays`, turn after turn (both see the machine
    as it runs then), each its own conversation (its first message made new: `renamed`, as
    another session of the agent would be); after each turn, `CONTROLS` requests of
    constant cost straight to the gateway."""
    fmt, messages, cuts = turns_of(trace)
    found = {name: Replayed() for name in relays}
    conversations = {name: renamed(messages) for name in relays}
    connections = {name: Connection.to(relay.url) for name, relay in relays.items()}
    control = Connection.to(gateway.url)
    control_request = request(f"{gateway.url}/llm/{UPSTREAM_NAME}{CONTROL_PATH}", CONTROL_BODY)
    try:
        for cut in cuts:
            for name, relay in relays.items():
                url = f"{relay.url}/llm/{UPSTREAM_NAME}{PATHS[fmt.name]}"
                body = body_of(fmt.name, conversations[name][:cut])
                before = gateway.cpu()
                answer = await connections[name].send(request(url, body, HEADERS))
                if answer.status != 200:
                    raise RuntimeError(f"{trace.name}: {answer.status} {answer.body[:300]!r}")
                found[name].cpu.append(gateway.cpu() - before)
                found[name].bodies.append(recorder.bodies[-1])
                # summed, not a median: the kernel counts a short run now and then late
                before = gateway.cpu()
                for _ in range(CONTROLS):
                    await control.send(control_request)
                found[name].control.append(gateway.cpu() - before)
    finally:
        for connection in (*connections.values(), control):
            await connection.close()
    return found


async def _run(found: list[Trace]) -> Section:
    judged = [t for t in found if len(turns_of(t)[2]) >= MIN_TURNS and turns_of(t)[0].name in PATHS]
    recorder = Recorder()
    server = await asyncio.start_server(recorder.handle, "127.0.0.1", free_port(), limit=1 << 24)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    rows = []
    ratios: list[tuple[float, float]] = []
    growths: list[float] = []
    most: list[tuple[float, float]] = []  # the ceiling of each conversation
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        launcher = Launcher(stack, Path(folder))
        gateway = launcher.gateway(AFTER, upstream, "gateway")
        await launcher.wait()
        relays = {
            "on": launcher.relay(AFTER, gateway.url, "relay-editing", "--context-editing"),
            "off": launcher.relay(AFTER, gateway.url, "relay-direct", "--no-context-editing"),
        }
        await launcher.wait()
        for trace in judged:
            replayed = await replay(trace, relays, gateway, recorder)
            on, off = replayed["on"], replayed["off"]
            tokens = sum(map(len, on.bodies)) / sum(map(len, off.bodies))
            priced = cost(on.bodies) / cost(off.bodies)
            ratios.append((tokens, priced))
            window = min(WINDOW, len(on.cpu) // 2)
            first, last, pace = on.growth(window)
            growth = last / first
            growths.append(growth)
            off_first, off_last, _ = off.growth(window)
            fmt = turns_of(trace)[0].name
            rows.append(
                [
                    trace.name,
                    str(len(on.bodies)),
                    f"{sum(map(len, off.bodies)) / 4 / 1e3:,.0f}k",
                    f"{tokens:.2f}",
                    f"{priced:.2f}",
                    str(rewrites(on.bodies, off.bodies)),
                    *_most(off.bodies, fmt, "messages", most),
                    f"{first * 1e3:.2f} / {last * 1e3:.2f}",
                    f"{growth:.2f}",
                    f"{off_first * 1e3:.2f} / {off_last * 1e3:.2f}",
                    f"{off_last / off_first:.2f}",
                    f"{pace:.2f}",
                ]
            )
    server.close()
    sessions = await context_agents.sessions()
    for name, (on_bodies, off_bodies, llm) in sessions.items():
        tokens = sum(map(len, on_bodies)) / sum(map(len, off_bodies))
        priced = cost(on_bodies) / cost(off_bodies)
        ratios.append((tokens, priced))
        rows.append(
            [
                name,
                str(len(on_bodies)),
                f"{sum(map(len, off_bodies)) / 4 / 1e3:,.0f}k",
                f"{tokens:.2f}",
                f"{priced:.2f}",
                str(rewrites(on_bodies, off_bodies)),
                *_most(off_bodies, llm.format, llm.messages_key, most),
                *["–"] * 5,
            ]
        )
    return _section(rows, ratios, growths, [t.name for t in judged], list(sessions), most=most)


def _most(
    bodies: list[bytes], format_name: str, key: str, found: list[tuple[float, float]]
) -> list[str]:
    """The ceiling's cells (`context_ceiling`): the results' share of the last body, the
    tokens and cost with every result replaced, over direct (kept in `found` too)."""
    most = ceiling(bodies, format_name, key)
    if most is None:
        return ["–"] * 3
    found.append((most.tokens, most.cost))
    return [f"{most.results_share:.2f}", f"{most.tokens:.2f}", f"{most.cost:.2f}"]


def _section(
    rows: list[list[str]],
    ratios: list[tuple[float, float]],
    growths: list[float],
    judged: list[str],
    sessions: list[str],
    *,
    most: list[tuple[float, float]],
) -> Section:
    verdicts = []
    if ratios:
        for name, at in (("input tokens", 0), ("cost", 1)):
            values = [r[at] for r in ratios]
            median, worst = statistics.median(values), max(values)
            verdicts.append(
                f"{'PASS' if median <= MEDIAN_AT_MOST else 'FAIL'}: {name} with editing over "
                f"direct, the median of the traces and sessions: {median:.2f} (target at most "
                f"{MEDIAN_AT_MOST})"
            )
            verdicts.append(
                f"{'PASS' if worst <= EACH_AT_MOST else 'FAIL'}: {name}, each one: at most "
                f"{worst:.2f} (target at most {EACH_AT_MOST})"
            )
    if most:
        tokens, cost_ = [m[0] for m in most], [m[1] for m in most]
        verdicts.append(
            "the most replacing results can save (`the most`: every result replaced from the "
            f"turn after it arrived): tokens {statistics.median(tokens):.2f} median, "
            f"{max(tokens):.2f} at most; cost {statistics.median(cost_):.2f} median, "
            f"{max(cost_):.2f} at most (no target: where these pass a target above, no "
            "policy of replacing results meets it on these conversations)"
        )
    if growths:
        worst_growth = max(growths)
        verdicts.append(
            f"{'PASS' if worst_growth <= GROWTH_AT_MOST else 'FAIL'}: the gateway's CPU per "
            f"turn with editing, last {WINDOW} turns over the first: at most {worst_growth:.2f} "
            f"(target at most {GROWTH_AT_MOST}; the same gateway without editing, and the "
            "control, beside it)"
        )
    names = ", ".join(judged) or "none (the shared traces are absent)"
    agents = ", ".join(sessions) or "none (node or the agent CLIs cannot run here)"
    return Section(
        "Context editing (issue 41): the model's input",
        f"`{COMMAND}`. {__doc__.split(chr(10) + chr(10), 1)[1].strip()} Traces: {names}. "
        f"Agent sessions: {agents} (`loadtests/context_agents.py`: the CLI itself through "
        "relay and gateway, editing on and off; no CPU figures: the gateway runs in this "
        "process). `tokens`, `cost`: with editing over direct; `rewrites`: turns on which "
        "editing made the provider write its cache again "
        "(never one per turn). `the most`: every tool result replaced by its stand-in from "
        "the turn after it arrived (`loadtests/context_ceiling.py`, in process over the "
        "direct bodies): no policy saves more by replacing results alone; the rest of the "
        "conversation (the model's own messages above all) passes as the client wrote it.",
        [
            "trace",
            "turns",
            "direct input tokens",
            "tokens",
            "cost",
            "rewrites",
            "results' share of the last body",
            "the most: tokens",
            "the most: cost",
            "gateway CPU ms, first / last turns",
            "CPU growth",
            "no editing: CPU ms, first / last",
            "CPU growth, no editing",
            "control's growth",
        ],
        rows,
        {},
        verdicts,
        plotted=False,
    )


def run(found: list[Trace]) -> Section:
    return asyncio.run(_run(found))


def main() -> int:
    found = traces.load()
    shown(run(found), sys.argv[1:])
    return 0 if found else 2


if __name__ == "__main__":
    from loadtests.report import usage

    usage(__doc__, "context_bench", write=True)
    sys.exit(main())
