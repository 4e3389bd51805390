"""Run a command in a network namespace of its own, with only loopback: what runs there
(the fake provider, the relay, the gateway, the agent CLIs) cannot reach anything off the
machine, which proves an end-to-end run is offline.

    python -m tests.e2e.isolate CMD [ARGS...]

Uses `unshare -n` (as root) or `unshare -r -n` (a user namespace where the caller is root),
brings `lo` up inside, sets TOOLREF_E2E_NETNS=1 and runs CMD. When neither is permitted it
says so on stderr and runs CMD as it is (TOOLREF_E2E_NETNS=0): the tests then report that
the run was not isolated.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence

FLAG = "TOOLREF_E2E_NETNS"
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def isolated() -> bool:
    """This process sees no network interface but loopback."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def loopback_up() -> None:
    """`ip link set lo up`, without needing `ip`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _unshare_options() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    for options in (["-n"], ["-r", "-n"]):
        probe = subprocess.run(["unshare", *options, "true"], check=False, capture_output=True)
        if probe.returncode == 0:
            return options
    return None


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--inside"]:
        loopback_up()
        os.environ[FLAG] = "1"
        os.execvp(args[1], args[1:])
    if not args:
        raise SystemExit("usage: python -m tests.e2e.isolate CMD [ARGS...]")
    if isolated():
        os.environ[FLAG] = "1"
        os.execvp(args[0], args)
    options = _unshare_options()
    if options is None:
        print(
            "e2e: note: unshare -n is not permitted here; running WITHOUT network isolation",
            file=sys.stderr,
        )
        os.environ[FLAG] = "0"
        os.execvp(args[0], args)
    os.execvp(
        "unshare",
        ["unshare", *options, sys.executable, "-m", "tests.e2e.isolate", "--inside", *args],
    )


if __name__ == "__main__":
    main()
