"""`Channels`: an SDK sender's channels (`AsyncTransport`'s), one per origin, path and
credentials, learnt per endpoint from the receiver's answers; each a
`toolref.sending.channel_transport.ChannelTransport`. Only edits ride a channel."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from toolref.edits.wire import MEDIA_TYPE as EDIT_TYPE
from toolref.sending.backoff import FIRST, LONGEST
from toolref.sending.channel_link import timeout_of
from toolref.sending.channel_transport import CREDENTIALS, ChannelTransport
from toolref.wire.encoding import media_type
from toolref.wire.endpoints import CHANNEL_PATH
from toolref.wire.headers import CHANNEL_HEADER, EDITS_HEADER

MAX_CHANNELS: Final = 64  # a sender's channels open at once
MAX_ENDPOINTS: Final = 256  # endpoints whose channel a sender remembers


class Channels:
    """A sender's channels (the SDK's `AsyncTransport`): the channel each endpoint's answer
    told of (`Toolref-Channel`: a path on its origin, the latest said), and the channels
    open, one per origin, path and credentials (a channel carries one caller's turns,
    authenticated as the caller that opened it), at most `MAX_CHANNELS`, the least
    recently used closed first; endpoints remembered, at most `MAX_ENDPOINTS`. Only edits
    ride a channel. `retry_max`: each channel's back-off cap (`toolref.sending.backoff`;
    one below its first wait, 30 s, is every wait)."""

    def __init__(self, report: Callable[[str], None], retry_max: float = LONGEST) -> None:
        self.report = report
        self.retry_max = retry_max
        self.paths: OrderedDict[str, str] = OrderedDict()  # endpoint -> its channel's path
        self.open: OrderedDict[tuple[str, str, tuple[str, ...]], ChannelTransport] = OrderedDict()

    def told(self, request: Any, response: Any) -> None:
        """Learn from `response` (to `request`) where its endpoint's channel is: a
        receiver's answer (one saying `Toolref-Edits`) names it, or says by naming none
        that it serves none (any more)."""
        if response.headers.get(EDITS_HEADER) is None:
            return  # not a receiver's word on it (a problem, a plain backend)
        path = response.headers.get(CHANNEL_HEADER)
        endpoint = _origin(request) + request.url.path
        if path is None or CHANNEL_PATH.fullmatch(path) is None:
            self.paths.pop(endpoint, None)
            return
        self.paths[endpoint] = path
        self.paths.move_to_end(endpoint)
        while len(self.paths) > MAX_ENDPOINTS:
            self.paths.popitem(last=False)

    async def sender(self, inner: Any, request: Any) -> Any:
        """What sends `request`: its endpoint's channel when it is an edit and the endpoint
        told of one, else `inner`."""
        if not _is_edit(request.headers):
            return inner
        origin = _origin(request)
        path = self.paths.get(origin + request.url.path)
        if path is None:
            return inner
        key = (origin, path, tuple(request.headers.get(name, "") for name in CREDENTIALS))
        found = self.open.get(key)
        if found is not None:
            self.open.move_to_end(key)
            return found
        found = self.open[key] = ChannelTransport(
            inner,
            origin,
            None,
            path=path,
            connect_timeout=timeout_of(request, "connect") or 10.0,
            report=self.report,
            credentials=CREDENTIALS,
            retry_seconds=min(FIRST, self.retry_max),
            longest_retry_seconds=self.retry_max,
        )
        if len(self.open) > MAX_CHANNELS:  # the least recently used with no turn in flight
            idle = next((k for k, c in self.open.items() if k != key and not c.busy), None)
            if idle is None:  # every one busy: this turn over HTTP, no channel made
                del self.open[key]
                return inner
            await self.open.pop(idle).close_link()
        return found

    async def aclose(self) -> None:
        """Close every channel (not the transports they wrap)."""
        while self.open:
            await self.open.popitem()[1].close_link()


def _origin(request: Any) -> str:
    return f"{request.url.scheme}://{request.url.netloc.decode('ascii')}"


def _is_edit(headers: Any) -> bool:
    return media_type(headers.get("content-type")) == EDIT_TYPE
