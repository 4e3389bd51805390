"""How soon `toolref relay` answers: `toolref relay --help` to its exit, and `toolref relay`
started to its port accepting a connection (issue 40: both under 300 ms), each the median of
`RUNS` starts, as real processes beside a gateway that listens.

    python -m loadtests.startup URL     # against a gateway listening at URL
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from loadtests.systems import KEY, Code, free_port

RUNS: Final = 7
TARGET_MS: Final = 300.0
_POLL: Final = 0.002  # seconds between connection attempts


def _command(code: Code, *args: str) -> list[str]:
    return [sys.executable, "-m", f"{code.relay_module}.cli", "relay", *args]


def help_ms(code: Code) -> float:
    """`toolref relay --help`, from the process's start to its exit."""
    started = time.perf_counter()
    subprocess.run(_command(code, "--help"), env=code.env(), cwd=code.cwd, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    return (time.perf_counter() - started) * 1e3


def listening_ms(code: Code, gateway: str, scratch: Path) -> float:
    """`toolref relay --gateway URL`, from the process's start to its port accepting."""
    port = free_port()
    command = _command(code, "--gateway", gateway, "--port", str(port),
                       "--token-file", str(scratch / f"startup-{port}.token"))  # fmt: skip
    started = time.perf_counter()
    popen = subprocess.Popen(command, env=code.env(TOOLREF_KEY=KEY), cwd=code.cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return (time.perf_counter() - started) * 1e3
            except OSError:
                if popen.poll() is not None:
                    raise RuntimeError(
                        f"the relay exited ({popen.returncode}) before listening"
                    ) from None
                if time.perf_counter() - started > 30:
                    raise RuntimeError("the relay did not listen within 30 s") from None
                time.sleep(_POLL)
    finally:
        popen.terminate()
        popen.wait(timeout=30)


def verdicts(code: Code, gateway: str) -> list[str]:
    """Issue 40's start-up checks, as report lines."""
    with tempfile.TemporaryDirectory(prefix="toolref-startup-") as scratch:
        helped = statistics.median(help_ms(code) for _ in range(RUNS))
        folder = Path(scratch)
        listened = statistics.median(listening_ms(code, gateway, folder) for _ in range(RUNS))
    return [
        f"{'PASS' if ms <= TARGET_MS else 'FAIL'}: {what}: {ms:.0f} ms, median of {RUNS} "
        f"(target at most {TARGET_MS:.0f} ms)"
        for what, ms in (
            ("`toolref relay --help`, start to exit", helped),
            ("`toolref relay`, start to listening", listened),
        )
    ]


def main() -> int:
    from loadtests.systems import AFTER

    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 0 if sys.argv[1:] in (["-h"], ["--help"]) else 2
    print(f"load average {os.getloadavg()[0]:.1f}")
    for line in verdicts(AFTER, sys.argv[1]):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
