"""The limits of one connection as the app publishes them (`ConnectionLimits`), and the
connection limit: how many a worker keeps open, fitted to the open-files limit, and which
idle connection is closed to make room for a new one."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final, Protocol
from weakref import WeakKeyDictionary

from uvicorn.server import ServerState

from toolref.wire.errors import ConfigurationError
from toolref_server.metrics import Metrics
from toolref_server.resources import open_files_limit
from toolref_server.settings import Settings

log = logging.getLogger(__name__)

# Where the app's lifespan state holds the `ConnectionLimits` every connection reads.
STATE_KEY: Final = "toolref.connections"
_RESERVED_FILES: Final = 64  # listening socket, logs, the engine's pipes, threads' files


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float
    body_timeout: float
    body_min_rate: int
    send_timeout: float
    keep_alive: float
    max_connections: int
    retry_after: int
    metrics: Metrics

    @classmethod
    def of(cls, settings: Settings, metrics: Metrics) -> ConnectionLimits:
        return cls(
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            body_min_rate=settings.body_min_rate,
            send_timeout=settings.send_timeout,
            keep_alive=settings.keep_alive_timeout,
            max_connections=connection_budget(settings),
            retry_after=settings.retry_after_seconds,
            metrics=metrics,
        )


def published(app_state: dict[str, Any], protocol: str) -> ConnectionLimits:
    """The `ConnectionLimits` the app's lifespan published (what `protocol`, a connection's
    class, reads); `ConfigurationError` naming the fix where there are none."""
    limits = app_state.get(STATE_KEY)
    if not isinstance(limits, ConnectionLimits):
        raise ConfigurationError(
            f"{protocol} needs the app's lifespan to publish ConnectionLimits under "
            f"{STATE_KEY!r} (toolref_server.app.create_app does); run it with that app, with "
            "lifespan on"
        )
    return limits


def connection_budget(settings: Settings) -> int:
    """TOOLREF_MAX_CONNECTIONS, lowered to what the open-files limit leaves: each connection
    is a descriptor, and the Redis pool and the process need some of their own."""
    limit = open_files_limit()
    room = limit - settings.redis_max_connections - _RESERVED_FILES
    if settings.max_connections <= room:
        return settings.max_connections
    allowed = max(room, 16)
    log.warning(
        "TOOLREF_MAX_CONNECTIONS=%d is more than the open-files limit %d leaves after the "
        "Redis pool and the process's own files; serving at most %d connections: raise the "
        "hard limit (ulimit -Hn) or lower TOOLREF_MAX_CONNECTIONS",
        settings.max_connections,
        limit,
        allowed,
    )
    return allowed


class Waiting(Protocol):
    """A connection as the connection limit sees it (`toolref_server.http.connection`)."""

    @property
    def head_bytes(self) -> int:
        """Bytes of a request head received so far (0 when idle between requests)."""

    def unread_bytes(self) -> int:
        """Bytes the client sent that the server has not read yet (0 if unknown)."""

    def evict(self) -> None:
        """Close this idle connection to make room for a new one."""


class IdleConnections:
    """The connections of one server waiting for a request head, longest waiting first."""

    def __init__(self) -> None:
        self.waiting: dict[Waiting, None] = {}

    def add(self, connection: Waiting) -> None:
        self.waiting.pop(connection, None)
        self.waiting[connection] = None

    def discard(self, connection: Waiting) -> None:
        self.waiting.pop(connection, None)

    def oldest(self, other_than: Waiting) -> Waiting | None:
        """The connection to close for a new one: the one idle longest that has sent
        nothing, else the one whose head has been arriving longest. Never one with bytes
        waiting to be read: a client that has sent its request is not idle, even if the
        server has not read it yet (a burst of new connections is accepted before any of
        them is read)."""
        partial: Waiting | None = None
        for connection in self.waiting:
            if connection is other_than or connection.unread_bytes():
                continue
            if not connection.head_bytes:
                return connection
            partial = partial or connection
        return partial


_IDLE: WeakKeyDictionary[ServerState, IdleConnections] = WeakKeyDictionary()


def idle_connections(server: ServerState) -> IdleConnections:
    """The idle connections of `server` (one uvicorn server: a worker process)."""
    return _IDLE.setdefault(server, IdleConnections())
