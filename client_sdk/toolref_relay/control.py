"""The relay's control endpoints (`GET /metrics`, `/toolref/switch`, `GET /toolref/check`:
its gateway checked now, for `toolref doctor`) and the token they
need: drawn at each start, asked of every request that controls the relay or reads its
counters (those endpoints, a `Toolref-Switch` header), compared in constant time, and
written to a file only its user can read.

Any process on the machine can reach a loopback port; the token keeps those of other users
(and pages, which the Host and Origin checks of `guard` stop first) from switching the
agent's upstream or reading its counters.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from toolref.asgi.hops import Pairs, first
from toolref.asgi.scope import Disconnected, Receive, Send, read_body
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import SWITCH_HEADER

from .ledger import FAILED, TURNS, UPLOAD_BYTES
from .replies import reply, reply_json
from .switch import Switchboard

CHECK_PATH: Final = "/toolref/check"
CONTROL_PATHS: Final = frozenset({"/metrics", "/toolref/switch", CHECK_PATH})
_SWITCH_FIX: Final = "a switch request is a small JSON object"
_SWITCH_LIMIT: Final = 4096  # bytes of a switch request
_CHALLENGE: Final = ("www-authenticate", 'Bearer realm="toolref relay"')
_BEARER: Final = "bearer "


def default_path(port: int) -> Path:
    """Where `toolref relay` writes the token of a relay on `port`."""
    return Path.home() / ".toolref" / f"relay-{port}.token"


def same(given: str | None, token: str) -> bool:
    """`given` is the token (in constant time; None never is)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


def bearer(headers: Pairs) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (None without one)."""
    value = first(headers, "authorization")
    if value is None or value[: len(_BEARER)].lower() != _BEARER:
        return None
    return value[len(_BEARER) :].strip()


def switch_request(value: str) -> tuple[str, str | None]:
    """(upstream, token) of a `Toolref-Switch: NAME; token="TOKEN"` header value (the token
    None when it has none). Linear in the value."""
    name, _, rest = value.partition(";")
    token = None
    for parameter in rest.split(";"):
        key, _, given = parameter.strip().partition("=")
        if key.strip().lower() == "token":
            token = given.strip().strip('"')
    return name.strip(), token


def needs_token(what: str, how: str, token_file: str | None) -> str:
    """What an answer to `what` without the right token says; `how`: where the token goes."""
    where = f"in {token_file}" if token_file else "RelayConfig.token: this relay wrote no file"
    return f"toolref relay: {what} needs this start's control token ({where}); send {how}"


def switch_header(value: str, token: str, token_file: str | None) -> tuple[str, str | None]:
    """(upstream, why it is refused) for a `Toolref-Switch` header: None when it carries
    the token. A request that can send this header could switch without the token
    otherwise."""
    name, given = switch_request(value)
    if same(given, token):
        return name, None
    how = f'{SWITCH_HEADER}: {name or "NAME"}; token="<token>"'
    return name, needs_token(f"the {SWITCH_HEADER} header", how, token_file)


@dataclass(frozen=True, slots=True)
class Request:
    """A request to a control endpoint, and the token this start needs."""

    path: str
    method: str
    headers: Pairs
    token: str
    token_file: str | None


async def serve(
    request: Request,
    receive: Receive,
    send: Send,
    board: Switchboard,
    select: Callable[[str], None],
    *,
    check: Callable[[], Awaitable[dict[str, object]]],
) -> None:
    """Answer a control endpoint (`CONTROL_PATHS`): 401 without the token; `select` switches
    to the upstream a `POST /toolref/switch` names; `check` checks the gateway now."""
    if not same(bearer(request.headers), request.token):
        how = "the header Authorization: Bearer <token>"
        refused = needs_token(request.path, how, request.token_file)
        body = json.dumps({"error": refused}).encode()
        await reply(send, 401, body, "application/json", [_CHALLENGE])
    elif request.path == "/toolref/switch":
        await _switch(request.method, receive, send, board, select)
    elif request.path == CHECK_PATH:
        if request.method != "GET":
            await reply_json(send, 405, {"error": f"GET {CHECK_PATH}"})
            return
        await reply_json(send, 200, await check())
    elif request.method == "GET":
        await _metrics(send)
    else:
        await reply_json(send, 405, {"error": "GET /metrics"})


async def _switch(
    method: str, receive: Receive, send: Send, board: Switchboard, select: Callable[[str], None]
) -> None:
    if method == "POST":
        try:
            body = json.loads(await read_body(receive, _SWITCH_LIMIT, _SWITCH_FIX))
            select(str(body["upstream"]))
        except Disconnected:
            return
        except (ToolrefError, ValueError, KeyError, TypeError, RecursionError) as exc:
            # RecursionError: `[[[...` nested past the parser, within the 4 KiB
            detail = f'{exc}; send {{"upstream": NAME}} naming one of {list(board.names)}'
            await reply_json(send, 400, {"error": detail})
            return
    elif method != "GET":
        await reply_json(send, 405, {"error": "GET or POST /toolref/switch"})
        return
    await reply_json(send, 200, {"upstreams": list(board.names), "selected": board.selected})


async def _metrics(send: Send) -> None:
    """Prometheus text: every metric of the process when prometheus_client is installed,
    else the relay's own counters."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    except ImportError:
        lines = []
        for made in (UPLOAD_BYTES, TURNS, FAILED):
            lines.append(f"# TYPE {made.name} counter")
            lines += [f'{made.name}{{{made.label}="{v}"}} {n}' for v, n in made.counts.items()]
        await reply(send, 200, ("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4")
        return
    await reply(send, 200, generate_latest(), CONTENT_TYPE_LATEST)


def write(path: Path, token: str) -> None:
    """`token` in `path`, readable and writable by the user alone (0600; its folder made
    0700 when missing), replaced whole: a reader never sees half of it, and a file or link
    already there is replaced, never written through."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:  # mkstemp made it 0600
            out.write(token + "\n")
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove(path: Path, token: str) -> None:
    """Delete `path` if it still holds `token` (another start on the port may have replaced
    it since); quietly, when it cannot be read or removed."""
    with contextlib.suppress(OSError):
        if path.read_text().strip() == token:
            path.unlink()
