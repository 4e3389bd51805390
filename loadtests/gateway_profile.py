"""Where the gateway's and the relay's CPU goes: the gateway-speed bench's processes (this
tree's code), sampled by py-spy while they serve small chat requests and then agent turns;
the top functions by time spent in them (self) and under them (total), per process and part.

py-spy is not a dependency of the project: `.venv/bin/pip install py-spy` first (it reads
the processes' memory: root, or `kernel.yama.ptrace_scope=0`).

    python -m loadtests.gateway_profile [--top 25] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path

from loadtests.bandwidth import turns_of
from loadtests.drive import Target, busy, sequential
from loadtests.gateway_speed import CONNECTIONS, PATH, PROTOCOL_2, PROVIDER, small
from loadtests.gateway_turns import HEADERS, PATHS, body_of, chosen, renamed
from loadtests.systems import AFTER, UPSTREAM_NAME, Launcher, Proc
from loadtests.traces import Trace, load


def _spies(procs: list[Proc], folder: Path, part: str) -> list[subprocess.Popen[bytes]]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    running = []
    for p in procs:
        output = str(folder / f"{part}-{p.name}.txt")
        command = [spy, "record", "--pid", str(p.popen.pid), "--format", "raw"]
        command += ["--rate", "500", "--nonblocking", "--output", output]
        quiet = subprocess.DEVNULL
        running.append(subprocess.Popen(command, stdout=quiet, stderr=quiet))
    return running


@asynccontextmanager
async def sampled(procs: list[Proc], folder: Path, part: str) -> AsyncIterator[None]:
    """py-spy recording each process (not its children) while the block runs."""
    running = _spies(procs, folder, part)
    await asyncio.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        for spying in running:
            spying.send_signal(signal.SIGINT)
        for spying in running:
            spying.wait(30)


IDLE = "selectors.py:EpollSelector.select"  # waiting for the network, not working
OURS = ("toolref/", "toolref_server/", "toolref_relay/")


def top(path: Path, count: int) -> str:
    """The `count` functions with the most busy samples in them (self), and toolref's own
    functions with the most under them (total); samples waiting in epoll left out."""
    own: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in path.read_text().split("\n"):  # not splitlines: a frame may hold \x1c-\x1e
        stack, _, samples = line.rpartition(" ")
        if not stack:
            continue
        n = int(samples)
        frames = [_short(f) for f in stack.split(";")]
        if frames[-1] == IDLE:
            idle += n
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            if frame.startswith(OURS):
                under[frame] += n
    lines = [f"{path.stem}: {total} busy samples ({idle} idle left out)"]
    for title, counter in (("self", own), ("total, toolref's functions", under)):
        lines.append(f"  by {title}:")
        lines += [f"    {n / total:6.1%}  {frame}" for frame, n in counter.most_common(count)]
    return "\n".join(lines)


def _short(frame: str) -> str:
    """`function (path:line)` as `file.py:function` (the path from its package down)."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "client_sdk/", "service/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{name}"


async def _run(found: list[Trace], folder: Path, small_count: int) -> None:
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolref-prof-")))
        launcher = Launcher(stack, scratch)
        upstream = launcher.upstream()
        gateway = launcher.gateway(AFTER, upstream, "gateway")
        relay = launcher.relay(AFTER, gateway.url, "relay")
        await launcher.wait()
        llm = f"/llm/{UPSTREAM_NAME}"
        alone = Target("gateway", "p2", gateway.url + llm + PATH, PROTOCOL_2, [gateway])
        chain = Target("relay", "after", relay.url + llm + PATH, PROVIDER, [relay, gateway])
        numbers = iter(range(1 << 62))
        for target in (alone, chain):  # warm
            await sequential(target, [small(next(numbers)) for _ in range(20)])
        async with sampled([gateway], folder, "small-gateway-p2"):
            await sequential(alone, [small(next(numbers)) for _ in range(small_count)])
        async with sampled([relay, gateway], folder, "small-chain"):
            await sequential(chain, [small(next(numbers)) for _ in range(small_count)])
        async with sampled([gateway], folder, "small-gateway-p2-at-32"):
            await busy(
                alone, small, connections=CONNECTIONS, seconds=5.0, upstream=upstream,
                client=lambda: 0.0,
            )  # fmt: skip
        traces = chosen(found, 2)
        for part, rename in (("turns", False), ("whole", True)):
            async with sampled([relay, gateway], folder, part):
                for trace in traces:
                    fmt, messages, cuts = turns_of(trace)
                    path = PATHS[fmt.name]
                    target = Target("relay", "after", relay.url + llm + path, HEADERS, [relay])
                    picked = cuts if not rename else cuts[:: max(1, len(cuts) // 10)]
                    for cut in picked:
                        conversation = renamed(messages[:cut]) if rename else messages[:cut]
                        await target.send(body_of(fmt.name, conversation))
                    await target.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="functions listed per profile")
    parser.add_argument("--small", type=int, default=1000, help="small requests per part")
    parser.add_argument("--keep", type=Path, help="keep py-spy's raw profiles in this folder")
    args = parser.parse_args()
    found = load()
    if not found:
        print("gateway profile: the shared traces are absent", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="toolref-spy-") as spare:
        folder = args.keep or Path(spare)
        folder.mkdir(parents=True, exist_ok=True)
        asyncio.run(_run(found, folder, args.small))
        for path in sorted(folder.glob("*.txt")):
            print(top(path, args.top), end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
