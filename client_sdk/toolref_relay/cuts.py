"""An answer the relay cuts on purpose (`UpstreamBroken`: the upstream broke off mid-answer),
and how its server's log says it (`QuietCuts`). No import beyond the standard library: the
command line installs the filter before anything heavy loads."""

from __future__ import annotations

import logging


class UpstreamBroken(Exception):
    """The answer broke off mid-stream. Raised out of the app after the answer started,
    so that the server aborts the agent's connection: a cut answer must not look whole."""


class QuietCuts(logging.Filter):
    """A handler's filter: the server's "Exception in ASGI application" for an answer the
    relay cut on purpose (`UpstreamBroken`: the upstream broke off, a gateway stopped) said
    as one warning with what happened, not as an error with two tracebacks; any other
    record as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, UpstreamBroken):
            record.msg, record.args = "an answer to the agent was cut: %s", (exc,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
