"""`WebSocket`: the service's WebSocket protocol (`toolref-server serve`'s `ws=`), the
shared `toolref.asgi.paced.PacedWebSocket` with the app's send timeout
(`TOOLREF_SEND_TIMEOUT`, from the `ConnectionLimits` its lifespan publishes, as the HTTP
layer's `Connection` reads them) and its drops counted as the HTTP layer's are
(`toolref_connections_closed{reason="send-timeout"}`). A connection upgraded by
`Connection.handle_websocket_upgrade` comes here: a client that reads nothing is not read
for, and is dropped after the send timeout, as over HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from toolref.asgi.paced import PacedWebSocket
from toolref_server.http.connection_limits import published


class WebSocket(PacedWebSocket):
    """See the module docstring."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = published(app_state, type(self).__name__)
        self.send_timeout = self.limits.send_timeout

    def dropped(self, reason: str) -> None:
        self.limits.metrics.connections_closed.labels(reason).inc()
