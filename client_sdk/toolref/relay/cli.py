"""`toolref relay`: the relay on loopback, in front of a toolref gateway.

    toolref relay --gateway https://toolref.example.com --key "$TOOLREF_KEY"
    ANTHROPIC_BASE_URL=http://127.0.0.1:8760/llm/anthropic claude

Needs the `relay` extra (from a toolref checkout: `pip install -e '.[relay]'`): uvicorn
serves the app.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from .config import MIB, RelayConfig

_DESCRIPTION = (
    "Serve the relay on loopback: an agent pointed at http://HOST:PORT/llm/NAME sends its "
    "LLM requests through the toolref gateway, tool results and history as refs. "
    "One line per turn on stderr says what was sent."
)


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="toolref", description="toolref command line")
    commands = made.add_subparsers(dest="command", required=True, metavar="COMMAND")
    relay = commands.add_parser("relay", help="serve the relay", description=_DESCRIPTION)
    relay.add_argument(
        "--gateway", required=True, help="base URL of the toolref service (gateway and registry)"
    )
    relay.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    relay.add_argument("--port", type=int, default=8760, help="port to listen on (8760)")
    relay.add_argument(
        "--key",
        default=None,
        help="the tenant's toolref key, sent as Toolref-Key (default: $TOOLREF_KEY); prefer "
        "the variable: arguments show in process lists",
    )
    relay.add_argument(
        "--fallback",
        default=None,
        help="the provider's base URL (https://api.anthropic.com): requests go there "
        "unchanged while the gateway cannot be reached (default: answer 502)",
    )
    relay.add_argument(
        "--switch",
        default="",
        metavar="NAME1,NAME2",
        help="upstreams to switch between (POST /toolref/switch, or SIGUSR1 for the next)",
    )
    relay.add_argument(
        "--max-body-bytes",
        type=int,
        default=64 * MIB,
        help="largest LLM request accepted from the agent, as sent (64 MiB)",
    )
    relay.add_argument(
        "--max-inflated-bytes",
        type=int,
        default=64 * MIB,
        help="largest a gzip or zstd LLM request may inflate to (64 MiB)",
    )
    relay.add_argument(
        "--max-inflated-in-flight",
        type=int,
        default=256 * MIB,
        help="most bytes every LLM request in flight may hold at once, as sent and inflated; "
        "past it a turn is answered 503 with Retry-After (256 MiB)",
    )
    relay.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="info logs each request: method, path, status, sizes (never keys or bodies)",
    )
    return made


def config_of(args: argparse.Namespace) -> RelayConfig:
    return RelayConfig(
        gateway=args.gateway,
        key=args.key or os.environ.get("TOOLREF_KEY") or None,
        fallback=args.fallback,
        switch=tuple(name.strip() for name in args.switch.split(",") if name.strip()),
        max_body_bytes=args.max_body_bytes,
        max_inflated_bytes=args.max_inflated_bytes,
        max_inflated_in_flight=args.max_inflated_in_flight,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        config = config_of(args)
    except ValueError as exc:
        sys.exit(f"toolref relay: {exc}")
    try:
        import uvicorn
    except ImportError:
        sys.exit("toolref relay needs uvicorn: from a toolref checkout, pip install -e '.[relay]'")
    from .app import Relay

    logging.basicConfig(level=args.log_level.upper(), format="%(name)s: %(message)s")
    print(
        f"toolref relay: listening on http://{args.host}:{args.port}/llm/NAME "
        f"(ANTHROPIC_BASE_URL=http://{args.host}:{args.port}/llm/anthropic)",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        Relay(config, signals=True),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,  # its lines carry query strings, where some providers take keys
        lifespan="on",
    )


if __name__ == "__main__":
    main()
