"""The gateway's own answers to a sender of edits say they are a receiver's.

A sender takes an answer to an edit that names neither a recipe (`Toolref-History`) nor
`Toolref-Edits`, and that it did not read as a toolref problem, for one from no receiver
of edits (`toolref.sending.stranger`: a proxy, a firewall, a backend rolled back): the
endpoint forgotten, edits paused, and a 500 sent again as it is (a body refused unread).
A sender reads no 5xx body but a 503's (a stream stays a stream), so the gateway marks
every answer it gives a request that is an edit or offers edits (`Toolref-Edits`), its
own problems included, whatever wrote them (`Answering`): a refusal raised before the
request went upstream, and a failure of its own (`failed`: the 500 it answers for an
exception it did not expect, where the access middleware, outside these marks, would
answer one without them). The provider may have answered already: the request sent again
would call it twice. An answer already marked (forwarded, `edited.marked`) is left as it
is. O(headers) per answer head.
"""

from __future__ import annotations

import logging
from typing import Final

from starlette.types import Message, Scope, Send

from toolref.asgi.scope import header
from toolref.edits.wire import VERSION
from toolref.wire.errors import ToolrefError
from toolref.wire.headers import EDITS_HEADER, asgi_name
from toolref_server.gateway.edited import is_edit
from toolref_server.http.access import unexpected
from toolref_server.logs import REQUEST_ID

EDITS: Final = (asgi_name(EDITS_HEADER), str(VERSION).encode())

log = logging.getLogger("toolref_server.access")  # where operators find "unhandled error"


class Answering:
    """`send` for a gateway request (`scope`), marking the answer's head with
    `Toolref-Edits` when the request is an edit or offers edits and no step marked it;
    `started`: whether the head went (a failure after it cannot be answered)."""

    __slots__ = ("_mark", "_send", "started")

    def __init__(self, scope: Scope, send: Send) -> None:
        self._send = send
        self._mark = is_edit(scope) or header(scope, EDITS_HEADER) is not None
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            headers = list(message.get("headers", []))
            if self._mark and not any(name.lower() == EDITS[0] for name, _ in headers):
                message = {**message, "headers": [*headers, EDITS]}
        await self._send(message)


def failed() -> ToolrefError:
    """The 500 the gateway answers for an exception it did not expect (logged here, with
    its traceback, under the request's id, as the access middleware logs one)."""
    request_id = REQUEST_ID.get() or "unknown"
    log.exception("unhandled error", extra={"request_id": request_id})
    return unexpected(request_id)
