"""Raw HTTP/1.1 over a socket, for tests that must send what no client library would
(slow heads, cut bodies, answers left unread): connect, read one reply."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

from tests.support.processes import Service


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def connect(service: Service, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port), timeout=timeout)


def read_reply(sock: socket.socket, timeout: float = 10.0, buffered: bytes = b"") -> Reply | None:
    """The next response on `sock` (its first bytes already read into `buffered`), or None
    when the server closes without one."""
    sock.settimeout(timeout)
    data = buffered
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Reply(int(status_line.split()[1]), headers, rest[:length])
