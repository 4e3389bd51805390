"""`GatewayLink`: what a turn needs of the relay, and nothing else: the config, the
connection pool to the gateway (and the fallback) with the request timeouts, whether the
gateway takes edits (`capabilities`), the upstream each request goes to (`switch`), the
budget of bodies in flight, and the ledger every turn is told to (its line reported, its
bytes counted).

The relay's app (`app.Relay`) makes one and hands it to the modules that serve a request
(`edited`, `passthrough`, `sockets`); they never see the app, so the arrows run one way:
app -> those modules -> link.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from toolref.asgi.budget import Budget
from toolref.sending.entries import Entries
from toolref.sending.pause import Pause
from toolref.wire.endpoints import CAPABILITIES
from toolref.wire.shapes import ErrorReply, error_reply

from .calls import Call
from .capabilities import Capabilities
from .config import RelayConfig
from .ledger import Tally, Totals, Upload, Who, turn_line
from .pool import Pool
from .switch import Switchboard


class GatewayLink:
    """See the module docstring. `report`: where the turn lines go."""

    def __init__(
        self,
        config: RelayConfig,
        pool: httpx.AsyncBaseTransport,
        report: Callable[[str], None],
        http: Pool | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.http = http  # the relay's own HTTP pool, under `pool` (None: a test's given)
        self.report = report
        self.capabilities = Capabilities(config.edits)
        self.paused = Pause()  # edits, while the gateway's store is down (`as_edit`)
        self.entries = Entries()  # the most entries an edit holds, as the gateway said
        self.switchboard = Switchboard(config.switch)
        self.budget = Budget(config.max_inflated_in_flight, setting="--max-inflated-in-flight")
        self.totals = Totals()
        self._timeouts = {
            "connect": config.connect_timeout,
            "read": config.read_timeout,
            "write": config.read_timeout,
            "pool": config.connect_timeout,
        }

    @property
    def tally(self) -> Tally:
        """Every agent's and upstream's turns together (the counters' numbers)."""
        return self.totals.all

    def told(self, whose: Who, upload: Upload) -> None:
        """Count `upload` in `whose` totals, and report its turn line."""
        number, tally = self.totals.add(whose, upload)
        self.report(turn_line(whose, number, upload, tally))

    def extensions(self, call: Call | None = None, url: str = "") -> dict[str, Any]:
        """The request extensions of every request to the gateway (and the fallback): the
        timeouts; for `call`'s request to `url`, its target as the agent sent it
        (`Call.exact`)."""
        timeouts = {"timeout": dict(self._timeouts)}
        return timeouts if call is None else {**timeouts, **call.exact(url)}

    async def takes_edits(self) -> bool:
        """Whether the gateway takes edits (asked at the first turn and relearnt;
        `capabilities`), its version then in `self.capabilities.version`."""

        async def ask() -> httpx.Response:
            url = self.config.gateway + CAPABILITIES
            request = httpx.Request("GET", url, extensions=self.extensions())
            return await self.pool.handle_async_request(request)

        edits = await self.capabilities.edits(ask)
        self.keep_alive(self.capabilities.keep_alive)
        return edits

    def keep_alive(self, seconds: int | None) -> None:
        """The gateway keeps an idle connection `seconds` (None: not said): the relay's
        own pool keeps one for less (`pool`)."""
        if self.http is not None:
            self.http.learnt(seconds)

    def gateway_down(self, call: Call, error: httpx.HTTPError) -> ErrorReply:
        """The 502 a request gets while the gateway cannot be reached, saying what to do."""
        message = (
            f"toolref relay: cannot reach the gateway {self.config.gateway} "
            f"({type(error).__name__}); start it, or start the relay with "
            "--fallback <the provider's base URL> to go straight to the provider meanwhile"
        )
        return error_reply(call.provider, 502, message, "toolref_gateway_unreachable")
