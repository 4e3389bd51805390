"""ASGI middleware that settles the protocol version of each request and reports it."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolref.asgi.scope import header_values
from toolref.wire.errors import InvalidProtocolError
from toolref.wire.headers import PROTOCOL_HEADER
from toolref.wire.protocol import negotiate
from toolref_server.http.problem import problem_response

_HEADER_KEY = PROTOCOL_HEADER.lower().encode()


class ProtocolMiddleware:
    """Puts the negotiated version in `scope["state"]["protocol"]` and in every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = header_values(scope, PROTOCOL_HEADER)
        try:
            version = negotiate(",".join(raw) if raw else None)
        except InvalidProtocolError as exc:
            response = problem_response(exc)
            response.headers[PROTOCOL_HEADER] = "1"
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["protocol"] = version
        value = str(version).encode()

        async def send_with_version(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k != _HEADER_KEY]
                headers.append((_HEADER_KEY, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_version)
