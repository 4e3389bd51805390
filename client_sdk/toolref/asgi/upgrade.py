"""`GetUpgrades`: uvicorn's h11 HTTP protocol, a WebSocket upgrade taken only for a GET.
The relay serves HTTP with it (`http=` of its uvicorn configuration); the service's
`toolref_server.http.connection.Connection` builds on it. It needs uvicorn, which both
install.

uvicorn hands any request carrying `Upgrade: websocket` and `Connection: Upgrade` to its
WebSocket protocol, whose handshake answers an empty 400 to one that is not a GET (a POST
to an LLM endpoint with those headers, as a fuzzer or a confused proxy sends). A WebSocket
handshake is a GET (RFC 6455 4.1), and a server may ignore `Upgrade` (RFC 9110 7.8): any
other request is served as the HTTP request it is.
"""

from __future__ import annotations

from uvicorn.protocols.http.h11_impl import H11Protocol


class GetUpgrades(H11Protocol):
    """See the module docstring."""

    def _should_upgrade(self) -> bool:
        return self.scope.get("method") == "GET" and super()._should_upgrade()
