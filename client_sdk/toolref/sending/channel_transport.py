"""`ChannelTransport`: a sender's turns over one WebSocket to its receiver
(`toolref.websocket.channel`, issue 39), so that a turn costs its edit and a few bytes of
framing instead of an HTTP head; every other request, and every request while the channel
cannot be had, through the transport it wraps. The relay's to the gateway; the SDK's
`AsyncTransport` to a gateway or to a backend's `ToolRefMiddleware`
(`toolref.receiving.channel_server` serves both).

Only the requests `rides` picks and whose body is whole ride the channel (turns and edits);
one still streaming (a pass-through) goes over HTTP. The channel opens on the first such
request (`GET {base}{path}`, `/v1/channel` by default, upgraded; the key, when given, and
the opening request's `credentials` headers at the upgrade) and serves every turn after it,
concurrently, each answer streamed back as it comes. A receiver that refuses the upgrade (an
older one, a backend without a channel, a proxy that does not pass WebSockets) or cannot be
reached leaves the sender on HTTP for `retry_seconds`, then it tries again (each failure in
a row doubling the wait: `toolref.sending.backoff`); a channel that closes fails the turns
in flight on it (as a broken connection would: the client retries), except at its receiver's
graceful stop (`frames.DRAINED`: every turn it read was answered, so one with no answer yet
was never read and goes over HTTP, a frame still being written at that close too), and the
next turn opens a new one, as does a turn after the channel sat idle `IDLE_SECONDS`; one
that takes no frame within a turn's write timeout (a receiver that reads nothing) is
dropped, the turn failing `WriteTimeout` as over HTTP, and so is one whose answer frame does
not read (a text message included), and one on which a turn's read timeout passed with no
frame come for any turn (`ReadTimeout`: a hung receiver, a connection a NAT dropped in use)
and no other turn's answer still coming; with one still coming, that turn alone fails (and
is cancelled) and the channel takes no new turn, closing once that answer ended (the next
turn opens a new one at once). A channel closed or dropped before any answer frame came
(a proxy that passes the upgrade and drops what follows), or before it lived
`backoff.healthy` seconds with no answer ended on it or a turn's unended (a receiver that
answers a frame, or ends one answer, then breaks each channel; one restarted between turns,
or drained, is opened again at once), cannot be had: HTTP for the back-off's wait, said. One
open channel, its turns and their answers: `toolref.sending.channel_link`.

Requests and answers of either httpx package (`toolref.registry.packages`): an answer is of
its request's package, and so is what is raised.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import time
from collections.abc import Callable
from typing import Any, Final

import httpx

from toolref.registry.packages import AsyncBaseTransport2
from toolref.sending.backoff import LONGEST, Backoff
from toolref.sending.channel_link import FRAMED, Link, Unsent
from toolref.sending.refusals import slug_of, toolref_problem
from toolref.websocket import bases
from toolref.websocket import channel as frames
from toolref.websocket.driver import Refusal, Unreachable, connect
from toolref.wire.endpoints import CHANNEL
from toolref.wire.headers import KEY_HEADER

MAX_MESSAGE: Final = 64 << 20  # bytes of one answer frame
# A channel idle this long is closed before the next turn and a new one opened: a NAT or a
# load balancer may drop an idle connection without a word, and a turn sent on it would
# wait its whole read timeout (httpcore expires an idle connection after 5 s).
IDLE_SECONDS: Final = 60.0
# a request's credentials, repeated on its channel's upgrade (the same origin) for a
# receiver that checks WebSockets at the upgrade; a channel is one set of them
CREDENTIALS: Final = ("authorization", "x-api-key", "api-key", "x-goog-api-key", "toolref-key")
_UNHEARD: Final = "closed before any answer came on it"
_HTTP_FOR: Final = "turns go over HTTP, the channel is tried again in"
_TOKEN: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a problem's slug, a quota's name


class ChannelTransport(httpx.AsyncBaseTransport, AsyncBaseTransport2):
    """See the module docstring. `inner`: the transport to the receiver (and everything
    else); `base`: the receiver's origin (its channel at `base` + `path`); `rides`: which
    requests to it take the channel (default: every POST); `credentials`: headers of the
    request that opens the channel repeated on its upgrade; `report`: told when the channel
    cannot be had; `longest_retry_seconds`: the back-off's cap; `random`: its jitter."""

    def __init__(
        self,
        inner: Any,
        base: str,
        key: str | None,
        *,
        connect_timeout: float,
        report: Callable[[str], None],
        path: str = CHANNEL,
        rides: Callable[[Any], bool] = lambda request: True,
        credentials: tuple[str, ...] = (),
        retry_seconds: float = 30.0,
        longest_retry_seconds: float = LONGEST,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] | None = None,
    ) -> None:
        self.inner = inner
        self.base = base.rstrip("/")
        self.url = self.base + path
        self.rides = rides
        self.credentials = credentials
        self.key = key
        self.connect_timeout = connect_timeout
        self.report = report
        self.backoff = Backoff(retry_seconds, longest_retry_seconds, random=random)
        self.clock = clock
        self._link: Link | None = None
        self._older: set[Link] = set()  # retired, their last turns' answers still coming
        self._opening = asyncio.Lock()
        self._retired = False  # closed by its owner: no channel is opened again

    async def handle_async_request(self, request: Any) -> Any:
        if (
            request.method != "POST"
            or not str(request.url).startswith(self.base + "/")
            or not _whole(request)  # a body still streaming
            or not self.rides(request)
            or len(request.content) > frames.MAX_FRAME_BYTES  # past a receiver's message limit
        ):
            return await self.inner.handle_async_request(request)  # not a turn
        link = await self._open(request)
        if link is None or len(link.streams) >= frames.MAX_STREAMS:  # none, or as busy as it serves
            return await self.inner.handle_async_request(request)
        try:
            answer = await link.send(request)
        except Unsent as unsent:  # the channel closed before the turn went out, or its
            answer = await self.inner.handle_async_request(request)  # receiver stopped
            if unsent.framed is not None:  # before reading it: its frame went on the wire
                answer.extensions[FRAMED] = unsent.framed
            return answer
        if answer.status_code == 503 and answer.headers.get(frames.BUSY[0]) == frames.BUSY[1]:
            await answer.aclose()  # the receiver did nothing with it (its turns counted on)
            framed = answer.extensions.get(FRAMED)
            answer = await self.inner.handle_async_request(request)
            if framed is not None:  # went on the wire before this one
                answer.extensions[FRAMED] = framed
        return answer

    async def aclose(self) -> None:
        await self.close_link()
        await self.inner.aclose()

    async def close_link(self) -> None:
        """Close the channel for good, not the transport it wraps (its owner's): turns go
        over that one from then on."""
        self._retired = True
        for link in [*self._older, *([self._link] if self._link is not None else [])]:
            await link.close()

    @property
    def busy(self) -> bool:
        """Whether turns are in flight on its channel (or on one it retired, its last
        answers still coming)."""
        links = [*self._older, *([self._link] if self._link is not None else [])]
        return any(not link.over and link.streams for link in links)

    async def _open(self, request: Any) -> Link | None:
        link = self._link
        lived = link.used - link.opened if link is not None and link.heard else 0.0
        self.backoff.lived(lived)
        if link is not None and link.closed and link.failed and lived < self.backoff.healthy:
            self._link, wait = None, self.backoff.failed(self.clock())  # cannot be had
            how = f"broke {lived:.0f}s after it opened" if link.heard else _UNHEARD
            self.report(f"toolref: the channel to {self.base} {how}; {_HTTP_FOR} {wait:.0f}s")
            return None
        idle = link is not None and not link.streams and self.clock() - link.used > IDLE_SECONDS
        if link is not None and not link.closed and idle:  # a NAT may have dropped it quietly
            await link.close()
        if self._link is not None and not self._link.closed:
            self._link.used = self.clock()
            return self._link
        if self._retired or not self.backoff.over(self.clock()):
            return None
        async with self._opening:  # one open at a time; those waiting see how it went
            if self._link is not None and not self._link.closed:
                return self._link
            if self._retired or not self.backoff.over(self.clock()):
                return None
            headers = [(frames.WINDOW_HEADER, str(frames.WINDOW))]  # windows, asked for
            headers += [(bases.HEADER, bases.OFFER)]  # and bases named by stream
            headers += [(KEY_HEADER, self.key)] if self.key else []
            headers += [
                (name, value) for name in self.credentials if (value := request.headers.get(name))
            ]  # the opening request's own: a receiver may check them at the upgrade
            try:
                socket = await connect(
                    self.url,
                    headers,
                    max_message=MAX_MESSAGE,
                    connect_timeout=self.connect_timeout,
                    ssl=_tls() if self.url.startswith("https:") else None,
                )
            except (Unreachable, Refusal, OSError, ValueError) as exc:
                wait = self.backoff.failed(self.clock())
                self.report(
                    f"toolref: no channel to {self.base} ({_why(exc)}); {_HTTP_FOR} {wait:.0f}s"
                )
                return None
            if self._retired:  # closed while it connected: nothing would ever close this one
                socket.abort()
                return None
            if (older := self._link) is not None and not older.over:  # retired: closes
                self._older.add(older)  # itself once its turns' answers ended
                older.reader.add_done_callback(lambda _: self._older.discard(older))
            self._link = Link(socket, self.clock)
            return self._link


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context httpx's own transport verifies with (certifi's authorities), so the
    channel trusts what the HTTP requests beside it trust."""
    context: ssl.SSLContext = httpx.create_ssl_context()
    return context


def _whole(request: Any) -> bool:
    """Whether `request`'s body is all in memory (not a stream still coming)."""
    try:
        request.content  # noqa: B018  # raises RequestNotRead when it is not
    except Exception:  # httpx's or httpx2's RequestNotRead
        return False
    return True


def _why(exc: BaseException) -> str:
    """Why no channel was had, for the report line: a refused upgrade's status, and the
    reason its toolref problem+json gives (its slug, and its `quota` where it names one:
    a gateway's 429 past the tenant's channels says `quota-exceeded, quota channels`)."""
    if isinstance(exc, Refusal):
        return f"the upgrade was answered {exc.status}" + _reason(exc.body)
    return f"{type(exc).__name__}: {exc}"


def _reason(body: bytes) -> str:
    """`: <slug>[, quota <quota>]` of a refusal's body when it is a toolref problem, else
    nothing. `body` is what the client kept of it (`client.MAX_REFUSAL` bytes at most): one
    parse, linear in it. Only short tokens are told, so the receiver cannot write the
    report line (a newline, a page of text)."""
    problem = toolref_problem(body)
    if problem is None:
        return ""
    slug, quota = slug_of(problem), problem.get("quota")
    if not _TOKEN.fullmatch(slug):
        return ""
    if isinstance(quota, str) and _TOKEN.fullmatch(quota):
        return f": {slug}, quota {quota}"
    return f": {slug}"
