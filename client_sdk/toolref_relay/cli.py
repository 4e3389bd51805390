"""`toolref relay`: the relay on loopback, in front of a toolref gateway.

    toolref relay --gateway https://toolref.example.com --key "$TOOLREF_KEY"
    ANTHROPIC_BASE_URL=http://127.0.0.1:8760/llm/anthropic claude

Needs the `relay` extra (from a toolref checkout: `pip install -e '.[relay]'`): uvicorn
serves the app. The port is bound first (a busy one fails before anything else is said),
then the gateway is checked (`preflight`: a gateway that does not answer, is not toolref's,
refuses the key or lacks a `--switch` upstream stops the start with one message, unless
`--no-gateway-check`), then the control token of this start is written (`control.write`; a
file that cannot be written stops the start: the token is never printed), then "listening",
each agent's set-up (`agents`) and where the token is are printed, and the app is served on
that socket: a relay that cannot bind leaves the token file of the one running on the port
alone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import importlib
import importlib.util
import logging
import math
import os
import shlex
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolref.wire import redaction

from .config import CHANNEL_RETRY_MAX, MIB, RelayConfig, base_url, misspelt_key
from .cuts import QuietCuts

# The relay's own modules (the app, the gateway check, the control endpoints) are imported
# once the port is bound: `toolref relay --help` and a busy port answer at once, and the
# relay listens before the app's imports (the kernel queues what comes meanwhile).

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
    relay.add_argument(
        "--host", type=_host, default="127.0.0.1", help="address to listen on (127.0.0.1)"
    )
    relay.add_argument(
        "--port", type=_port, default=8760, help="port to listen on, 0-65535 (8760; 0: any free)"
    )
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
        "--max-clients",
        type=int,
        default=8,
        help="clients (an upstream and a provider credential) whose state the relay keeps, "
        "least recently used dropped first (8)",
    )
    relay.add_argument(
        "--max-recipes",
        type=int,
        default=64,
        help="requests of each client the relay remembers to send the next as an edit of, "
        "least recently used dropped first (64)",
    )
    relay.add_argument(
        "--max-recipe-bytes",
        type=int,
        default=32 * MIB,
        help="most bytes each client's remembered requests may hold, each piece counted "
        "once (32 MiB)",
    )
    relay.add_argument(
        "--no-channel",
        action="store_true",
        help="send turns to the gateway as HTTP requests, never over its WebSocket channel",
    )
    relay.add_argument(
        "--channel-retry-max",
        type=float,
        default=CHANNEL_RETRY_MAX,
        metavar="SECONDS",
        help="after failures in a row to have the gateway's channel, turns go over HTTP for "
        "30 s, doubled after each, at most this long, before it is tried again (600)",
    )
    relay.add_argument(
        "--no-edits",
        action="store_true",
        help="never send requests as edits: each as it came (as to a gateway without edits)",
    )
    relay.add_argument(
        "--no-size-guard",
        action="store_true",
        help="compress each turn's new segments against the conversation (smaller, but their "
        "size then tells an observer of the link whether a text repeats one the conversation "
        "holds: only where no one else sees the sizes; docs/reliability.md)",
    )
    editing = relay.add_mutually_exclusive_group()
    editing.add_argument(
        "--context-editing",
        dest="context_editing",
        action="store_const",
        const=True,
        default=None,
        help="ask the gateway to replace old tool results by their summaries, so the model "
        "reads fewer tokens (docs/context-editing.md); by default the gateway's policy decides",
    )
    editing.add_argument(
        "--no-context-editing",
        dest="context_editing",
        action="store_const",
        const=False,
        help="refuse context editing: the provider gets every result as the agent sent it",
    )
    relay.add_argument(
        "--token-file",
        default=None,
        help="where to write this start's control token, readable only by you "
        "(~/.toolref/relay-PORT.token)",
    )
    relay.add_argument(
        "--max-inflated-in-flight",
        type=int,
        default=256 * MIB,
        help="most bytes the LLM requests whose answers have not begun may hold at once, as "
        "sent and inflated (a streaming answer holds none); past it a turn is answered 503 "
        "with Retry-After (256 MiB)",
    )
    relay.add_argument(
        "--send-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a WebSocket side (the agent, the gateway) that takes nothing the relay sends it "
        "for this long is let go (30)",
    )
    relay.add_argument(
        "--no-gateway-check",
        action="store_true",
        help="start even when --gateway is not a toolref gateway, refuses the key, or lacks "
        "the upstreams --switch names (by default the relay exits saying so)",
    )
    relay.add_argument(
        "--event-loop",
        default="auto",
        choices=("auto", "uvloop", "asyncio"),
        help="auto: uvloop where installed (the relay extra installs it), else asyncio's",
    )
    relay.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="info logs each request: method, path, status, sizes (never keys or bodies)",
    )
    doctor = commands.add_parser(
        "doctor",
        help="probe the chain: relay, gateway, key, each upstream",
        description="Send one probe through relay, gateway and each upstream (GET .../v1/models: "
        "no tokens spent) and report each hop with its status and time; exit 1 when one fails.",
    )
    doctor.add_argument(
        "--relay", default="http://127.0.0.1:8760", help="the relay's URL (http://127.0.0.1:8760)"
    )
    doctor.add_argument(
        "--token-file",
        default=None,
        help="the relay's control token file (~/.toolref/relay-PORT.token, as it wrote it)",
    )
    doctor.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds for each request (10)"
    )
    return made


def _port(text: str) -> int:
    """`--port`: a TCP port, 0-65535 (argparse says what is wrong, and exits 2)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a TCP port; give 0-65535 (8760 by default; 0: one the system picks)"
        )
    return port


def _host(text: str) -> str:
    """`--host`: an address or name; an IPv6 address as in a URL (`[::1]`) taken without
    its brackets, as the socket wants it. One with a port (`127.0.0.1:8760`, `[::1]:8760`)
    is refused: the port is `--port`'s."""
    host = text.strip()
    address, colon, port = host.rpartition(":")
    if colon and port.isdigit() and (address.endswith("]") or ":" not in address):
        raise argparse.ArgumentTypeError(
            f"{text!r} has a port; give the address alone and the port apart: "
            f"--host {address} --port {port}"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise argparse.ArgumentTypeError("an empty address; give one such as 127.0.0.1 or ::1")
    return host


def _seconds(text: str) -> float:
    """`--timeout`: a positive, finite number of seconds (0 would fail every request)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0; give one such as 10"
        )
    return seconds


def config_of(args: argparse.Namespace) -> RelayConfig:
    return RelayConfig(
        gateway=args.gateway,
        key=args.key or os.environ.get("TOOLREF_KEY") or None,
        fallback=args.fallback,
        switch=tuple(name.strip() for name in args.switch.split(",") if name.strip()),
        max_body_bytes=args.max_body_bytes,
        max_inflated_bytes=args.max_inflated_bytes,
        max_clients=args.max_clients,
        edits=not args.no_edits,
        channel=not args.no_channel,
        channel_retry_max=args.channel_retry_max,
        size_guard=not args.no_size_guard,
        context_editing=args.context_editing,
        max_recipes=args.max_recipes,
        max_recipe_bytes=args.max_recipe_bytes,
        max_inflated_in_flight=args.max_inflated_in_flight,
        send_timeout=args.send_timeout,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "doctor":
        sys.exit(_doctor(args))
    try:
        config = config_of(args)
    except ValueError as exc:
        sys.exit(redaction.shown(f"toolref relay: {exc}"))
    if args.event_loop == "uvloop" and not _importable("uvloop"):
        sys.exit(
            "toolref relay: --event-loop uvloop, but uvloop is not installed here; install it "
            "(pip install uvloop: not on Windows), or use --event-loop auto (uvloop where "
            "installed, else asyncio's loop)"
        )
    sock = _bind(args.host, args.port)  # first: a busy port fails before anything is said
    port = sock.getsockname()[1]
    try:
        import uvicorn
    except ImportError:
        sock.close()
        sys.exit("toolref relay needs uvicorn: from a toolref checkout, pip install -e '.[relay]'")
    from . import control
    from .agents import set_up_lines
    from .app import Relay
    from .preflight import OVERRIDDEN, OVERRIDE
    from .preflight import check as check_gateway

    logging.basicConfig(level=args.log_level.upper(), format="%(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # httpx logs each URL, query and all, at INFO
        handler.addFilter(redaction.LogRedactor())
        handler.addFilter(QuietCuts())  # an answer cut on purpose: one line, no traceback
    hint = misspelt_key(os.environ) if config.key is None else None
    if hint is not None:
        _say(hint)
    found = asyncio.run(
        check_gateway(
            config.gateway,
            config.key,
            switch=config.switch,
            fallback=config.fallback,
            request_timeout=config.connect_timeout,
        )
    )
    if found.problem is not None and not args.no_gateway_check:
        sock.close()
        sys.exit(redaction.shown(found.problem))  # one message, on stderr; exit 1
    _say(found.line.replace(OVERRIDE, OVERRIDDEN))
    token_file = Path(args.token_file) if args.token_file else control.default_path(port)
    try:
        control.write(token_file, config.token)
    except OSError as exc:
        sock.close()
        sys.exit(
            f"toolref relay: cannot write this start's control token to {token_file} "
            f"({exc.strerror or exc}); give --token-file a file in a folder you can write "
            "(the folder is made, 0700, when missing). The token is never printed."
        )
    config = dataclasses.replace(config, token_file=str(token_file))
    try:  # the app deletes the token file at its shutdown; a start failing before, here
        base = f"http://{_shown_host(args.host)}:{port}"
        _say(f"toolref relay: listening on {base}/llm/NAME")
        for line in set_up_lines(base, found.upstreams):
            _say(line)
        _say(token_line(token_file, base))
        app = Relay(config, signals=True, preflight=found)
        served = server_config(
            app, args.event_loop, args.log_level, config.max_body_bytes, config.send_timeout
        )
        uvicorn.Server(served).run(sockets=[sock])  # the app deletes the token file at exit
    finally:
        control.remove(token_file, config.token)


def server_config(
    app: Any, loop: str, log_level: str, max_body_bytes: int, send_timeout: float = 30.0
) -> Any:
    """The relay's uvicorn configuration (a `uvicorn.Config`) for `app`; `send_timeout`:
    `--send-timeout`, its WebSocket protocol's."""
    import uvicorn

    from toolref.asgi.paced import with_send_timeout

    return uvicorn.Config(
        app,
        log_level=log_level,
        loop=loop,
        # h11, whatever else is installed: uvicorn's default picks httptools where it is
        # (uvicorn[standard] installs it), whose protocol forwards a chunked body's trailers
        # as headers, drops a `gzip` transfer coding, loses the body of an `Upgrade: h2c`
        # request and queues pipelined requests without bound; matching h11 took more code
        # than its 5% of the relay's CPU was worth (docs/benchmarks.md, issue 40). Only a GET
        # is upgraded to a WebSocket: uvicorn's own answered any other request asking for
        # one (a POST with `Upgrade: websocket`) an empty 400 (toolref.asgi.upgrade).
        http="toolref.asgi.upgrade:GetUpgrades",
        access_log=False,  # its lines carry query strings, where some providers take keys
        # uvicorn's own lines (a WebSocket upgrade's path and query among them) go to the
        # handler above, through its redactor: uvicorn's logging set-up would give them a
        # handler of their own, with none.
        log_config=None,
        # The answer's headers are the provider's: no `server: uvicorn`, no second `date`.
        server_header=False,
        date_header=False,
        lifespan="on",
        # WebSocket mode (toolref_relay.websocket_mode) over wsproto; messages within the body
        # limit; no permessage-deflate (a small frame could inflate past any limit). Its
        # protocol stops reading an agent that reads nothing and drops it after
        # `--send-timeout` seconds (30).
        ws=with_send_timeout(send_timeout),
        ws_max_size=max_body_bytes,
        ws_per_message_deflate=False,
    )


def token_line(token_file: Path, base: str) -> str:
    """Where this start's control token is, and how to use it (never the token itself:
    what a supervisor or `nohup` keeps of stderr stays free of it)."""
    where = shlex.quote(str(token_file))
    return (
        "toolref relay: /metrics, /toolref/switch and /toolref/check (toolref doctor) need "
        f"this start's token, in {token_file} (readable only by you; removed at exit); e.g. "
        f'curl -H "Authorization: Bearer $(cat {where})" {base}/metrics'
    )


# A wildcard address (every interface) -> loopback's, of the same family.
_LOOPBACK_OF = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 (names it, binds nothing)


def _shown_host(host: str) -> str:
    """The host agents are told to use for a relay bound to `host`: a wildcard (0.0.0.0,
    ::) is no address a client may send as its `Host` (the relay serves its own address
    only), so loopback's; an IPv6 address in brackets."""
    host = _LOOPBACK_OF.get(host, host)
    return f"[{host}]" if ":" in host else host


def _doctor(args: argparse.Namespace) -> int:
    from . import control, doctor

    try:
        relay = base_url("--relay", args.relay)
    except ValueError as exc:
        sys.exit(redaction.shown(f"toolref doctor: {exc}"))
    parts = urlsplit(relay)
    if parts.path:  # `/llm/NAME` is an LLM path: the relay would send the token on with it
        alone = f"{parts.scheme}://{parts.netloc}"
        sys.exit(
            redaction.shown(
                f"toolref doctor: --relay is {relay!r}, with a path; give the relay's address "
                f"alone: {alone} (an agent's base URL, /llm/NAME, is no relay address: the "
                "relay would send the control token on to the gateway with it)"
            )
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    token_file = Path(args.token_file) if args.token_file else control.default_path(port)
    try:
        token: str | None = token_file.read_text().strip()
    except OSError:
        token = None  # the relay hop says what to do
    hops = asyncio.run(doctor.probe(relay, token, request_timeout=args.timeout))
    return 0 if doctor.report(hops, _say) else 1


def _importable(module: str) -> bool:
    """`module` is installed (found, not imported: the relay's start stays short)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (0: one the system picks), or the exit saying why."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on every connection it accepts: without
    # it an answer's head and body, written apart, waited ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except (OSError, OverflowError) as exc:  # Overflow: a port past 65535 (`_port` says so)
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        fix = _bind_fix(exc)
        sys.exit(f"toolref relay: cannot listen on {host}:{port} ({reason}); {fix}")
    sock.set_inheritable(True)
    return sock


def _bind_fix(exc: Exception) -> str:
    """What to do about `_bind`'s failure `exc`."""
    if isinstance(exc, socket.gaierror):
        return "--host names no address; give one such as 127.0.0.1 (the default) or ::1"
    code = exc.errno if isinstance(exc, OSError) else None
    if code == errno.EADDRINUSE:
        return (
            "another process listens there (a relay already running?): stop it, or give "
            "another --port (0: one the system picks)"
        )
    if code == errno.EADDRNOTAVAIL:
        return "that is no address of this machine: give --host 127.0.0.1 (the default)"
    if code == errno.EACCES:
        return "a port below 1024 needs privileges: give --port 1024 or above (8760 by default)"
    return "fix --host or --port"


def _say(line: str) -> None:
    """A line on stderr, any URL in it with its credentials masked (`--gateway` may carry
    some), what a terminal acts on escaped (`redaction.shown`); the control token it prints
    on purpose is no URL's."""
    print(redaction.shown(line), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
