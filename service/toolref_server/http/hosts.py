"""`KeylessHosts`: a service with no API keys (no TOOLREF_API_KEYS: bound to loopback, the
one `local` tenant) answers only requests for this machine's loopback names.

Such a service trusts whoever reaches its port, and only this machine can. But a web page
the operator opens can point a name of its own at 127.0.0.1 after it loaded (DNS
rebinding): its browser's requests then reach the port from loopback, as the page's own
origin, and the page reads the answers: it could register and resolve refs, read payloads,
make summaries on the operator's LLM key and send requests through the gateway's upstreams.
Those requests carry `Host: that.name`; so every HTTP request and WebSocket upgrade must
name `localhost` or a loopback address (`auth.foreign_host`, the rule `/metrics` keeps
without its own key), else 403 `forbidden`, before anything is read, stored or forwarded.

`/healthz` and `/readyz` answer any `Host`: they tell only that the process is up and the
store answers, and a probe names the service however it reaches it. With API keys the key
decides, whatever the `Host` (a service others reach by its own name): nothing is checked.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from toolref.wire import endpoints
from toolref.wire.encoding import PROBLEM_TYPE
from toolref.wire.errors import ForbiddenError
from toolref_server.http.auth import foreign_host, loopback
from toolref_server.http.problem import problem_body, problem_response
from toolref_server.settings import Settings

PROBES: Final = frozenset({endpoints.HEALTHZ, endpoints.READYZ})  # open to any Host
_GATEWAY: Final = endpoints.GATEWAY.partition("{")[0]  # "/llm/": an LLM SDK reads the refusal
_KEYGEN: Final = "toolref-server keygen TENANT"


class KeylessHosts:
    """ASGI middleware: see the module docstring. `settings` say whether there are keys."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.keyless = not settings.key_hashes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            not self.keyless
            or scope["type"] not in ("http", "websocket")
            or scope["path"] in PROBES
        ):
            await self.app(scope, receive, send)
            return
        host = foreign_host(HTTPConnection(scope))
        if host is None:
            await self.app(scope, receive, send)
            return
        error = refusal(scope, host)
        if scope["type"] == "http":
            llm = scope["path"].startswith(_GATEWAY)
            await problem_response(error, for_llm_sdks=llm)(scope, receive, send)
            return
        if (await receive())["type"] != "websocket.connect":
            return
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # the server answers 403
            return
        body = problem_body(error, for_llm_sdks=True)
        headers = [
            (b"content-type", PROBLEM_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "websocket.http.response.start", "status": 403, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})


def refusal(scope: Scope, host: str) -> ForbiddenError:
    """Why a request for `host` (quoted) is refused, and the two ways on: the service's
    loopback address, or API keys."""
    address = own_address(scope)
    return ForbiddenError(
        "this service has no API keys (TOOLREF_API_KEYS is not set), so it answers only "
        "requests for this machine's loopback names (Host localhost, 127.0.0.1 or [::1], "
        f"any port), and this one is for Host {host}: a web page that points a name of its "
        "own at this machine (DNS rebinding) sends such requests, and would use the "
        f"service as you. Reach it at {address} (or localhost); to serve it by another "
        f"name, set TOOLREF_API_KEYS (`{_KEYGEN}` makes a key and its entry) and send the "
        "key"
    )


def own_address(scope: Scope) -> str:
    """The URL of the service's loopback address: the socket's own when it is one (a
    service bound to ::1 has no 127.0.0.1), else 127.0.0.1; its port, else `PORT`."""
    server = scope.get("server")
    if not server or server[1] is None:
        return "http://127.0.0.1:PORT"
    name, port = server
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return f"http://127.0.0.1:{port}"
    if not loopback(address):
        return f"http://127.0.0.1:{port}"
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{shown}:{port}"
