"""This tree against another revision, side by side in one run, on the small requests of
`loadtests.gateway_speed` (its systems and its measure): what a change to the gateway or
the relay did, as ratios within one run on this machine.

    python -m loadtests.code_ab REVISION [--write]

`--write` puts the section into docs/benchmarks.md (its title names the revision). The
revision's SDK, relay and service are written out with `git archive` and run from
`PYTHONPATH`; it must have this tree's module layout (`toolref_relay`,
`toolref_server.gateway.gateway`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tarfile
import tempfile
from contextlib import ExitStack
from io import BytesIO
from pathlib import Path

from loadtests import gateway_speed
from loadtests.report import Section, replace_section
from loadtests.systems import BEFORE, ROOT, Code, Launcher

DOCS = ROOT / "docs" / "benchmarks.md"


def _archive(revision: str) -> bytes:
    return subprocess.run(
        ["git", "archive", revision, "client_sdk/toolref", "client_sdk/toolref_relay",
         "service/toolref_server"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip


def checkout(stack: ExitStack, revision: str) -> Code:
    """`revision`'s SDK, relay and service written out (`git archive`) into a folder the
    stack removes, as a `Code` run from `PYTHONPATH` (checked: it imports from there)."""
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolref-ab-")))
    with tarfile.open(fileobj=BytesIO(_archive(revision))) as tar:
        tar.extractall(folder, filter="data")
    path = f"{folder / 'client_sdk'}{os.pathsep}{folder / 'service'}"
    code = Code(revision, path, folder, "toolref_relay", "toolref_server.gateway.gateway")
    code.check()
    return code


async def measure(revision: str, label: str) -> Section:
    with ExitStack() as stack:
        other = checkout(stack, revision)
        gateway = other.gateway_module
        here = Code("after", "", ROOT, "toolref_relay", gateway)  # the column's `before`: it
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolref-gw-")))
        systems = await gateway_speed._start(Launcher(stack, scratch), [here, other])
        plan = gateway_speed.Plan(block=100, rounds=4, load_seconds=3.0, load_rounds=2)
        measured = await gateway_speed._small(systems, plan)
        command = f"python -m loadtests.code_ab {revision}"
        section = gateway_speed.small_section(systems, measured, command)
    section.title = f"This tree ({label}) against {revision}: small requests"
    section.intro = section.intro.replace(BEFORE, revision).replace(
        ", the last whose gateway called its own app over `httpx.ASGITransport`", ""
    )
    return section


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision")
    parser.add_argument("--label", default="this tree", help="what this tree changed")
    parser.add_argument("--write", action="store_true", help="into docs/benchmarks.md")
    args = parser.parse_args()
    section = asyncio.run(measure(args.revision, args.label))
    print(section.markdown())
    if args.write:
        replace_section(DOCS, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
