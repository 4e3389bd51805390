"""The relay's HTTP/1.1 server protocol: uvicorn's on httptools (llhttp, Node's parser, in C),
with h11's bound on a request's head.

Measured in `make bench` ("Gateway speed", the rows `relay on h11` beside the default):
uvicorn's h11 protocol, pure Python, cost the relay about 5% more CPU on a late agent turn
(`python -m loadtests.turns_ab --h11`: 2.05 ms against 1.94 on the longest trace's last
turns) and relay + gateway about 6% more on a small request.
`--http h11` keeps it (`--http auto`, the default: this one where httptools is installed,
as the relay extra installs it).

What h11 bounded and uvicorn's httptools protocol does not: the head. h11 refuses a request
whose line and headers pass 16 KiB (uvicorn's `h11_max_incomplete_event_size`) before its
end; httptools keeps whatever comes (the URL and a header's name and value, each joined
as it arrives). So this one counts a head's bytes past the read it began in, and past
`HEAD_LIMIT` answers 431 and closes: a head holds at most that and one read. The rest is
uvicorn's but two things h11 gives otherwise and the relay forwards: the request target
is split at its first `?` and nothing more (httptools' URL parser drops a `#...`, which an
agent's target may carry and the provider must get as sent), and a header's value loses
its trailing blanks (llhttp keeps them; h11, and the gateway's client, do not). Flow
control, keep-alive and upgrades to WebSocket (wsproto) are uvicorn's.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_LIMIT: Final = 16 * 1024  # h11's, as uvicorn configures it

_TOO_LARGE: Final = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
)


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, a request's head held to `HEAD_LIMIT` (module
    docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head: int | None = 0  # a head's bytes so far (past its first read); None: ended
        self._read = 0  # the bytes of the read being parsed

    def data_received(self, data: bytes) -> None:
        self._read = len(data)
        super().data_received(data)
        if self._head is None or self.transport.is_closing():
            return
        self._head += len(data)
        if self._head > HEAD_LIMIT:
            self._head = None
            self._refuse()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head = -self._read  # this read's bytes are counted once it was parsed

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value.strip(b" \t"))  # as h11 gives it (llhttp keeps the tail)

    def on_headers_complete(self) -> None:
        self._head = None
        super().on_headers_complete()
        if "raw_path" in self.scope:  # not an upgrade: its target as h11 splits it
            raw_path, _, query = self.url.partition(b"?")
            self.scope["path"] = self.root_path + unquote(raw_path.decode("ascii"))
            self.scope["raw_path"] = self.root_path.encode("ascii") + raw_path
            self.scope["query_string"] = query

    def _refuse(self) -> None:
        message = (
            f"the request's line and headers pass {HEAD_LIMIT} bytes; send fewer or "
            "shorter headers\n"
        ).encode()
        length = b"content-length: %d\r\n\r\n" % len(message)
        self.logger.warning("a request's head passed %d bytes: answered 431", HEAD_LIMIT)
        self.transport.write(_TOO_LARGE + length + message)
        self.transport.close()
