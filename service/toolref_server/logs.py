"""Structured logs: one JSON object per line, each carrying the id of its request.

Nothing a client sent is logged but the request line, the status and the sizes: never a body,
never a key. Secrets that still reach a message (an `Authorization` value, a bearer token, an
API key in an exception text, a URL's credentials, a request target's query values:
`toolref.wire.redaction`) are masked by `redact` before the line is written, whoever logged
it.
"""

from __future__ import annotations

import json
import logging
import logging.config
import re
import time
from contextvars import ContextVar
from typing import Any, Final

from toolref.wire import redaction

REQUEST_ID: ContextVar[str | None] = ContextVar("toolref_request_id", default=None)
MASK: Final = redaction.MASK

_SECRETS: Final = re.compile(
    r"(?i)(authorization\s*[:=]\s*)(\S+(?:\s+\S+)?)"  # a header written out
    r"|\b(bearer\s+)[A-Za-z0-9._~+/=-]+"  # a bearer credential anywhere
    r"|\btrk_[A-Za-z0-9_-]+"  # a key made by `toolref-server keygen`
)
# LogRecord's own attributes; anything else on a record came from `extra=` and is logged.
# uvicorn's `color_message` repeats the message with terminal colour codes.
_STANDARD: Final = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "color_message",
}
_SECRET_FIELDS: Final = frozenset({"authorization", "api_key", "body", "payload", "headers"})


def redact(text: str) -> str:
    """`text` with credentials masked: a URL's (`toolref.wire.redaction.urls_in`), a request
    target's query values (`targets_in`: uvicorn logs each WebSocket upgrade's path and
    query, where Gemini takes its key), and keys."""

    def mask(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(1) + MASK
        if match.group(3):
            return match.group(3) + MASK
        return MASK

    return _SECRETS.sub(mask, redaction.targets_in(redaction.urls_in(text)))


class JsonFormatter(logging.Formatter):
    """A log record as one JSON line: time, level, logger, message, request id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        request_id = getattr(record, "request_id", None) or REQUEST_ID.get()
        if request_id:
            line["requestId"] = request_id
        for name, value in record.__dict__.items():
            if name in _STANDARD or name == "request_id" or name in line:
                continue
            line[name] = MASK if name.lower() in _SECRET_FIELDS else _plain(value)
        if record.exc_info:
            line["error"] = redact(self.formatException(record.exc_info))
        # JSON escapes C0 controls; DEL, C1 controls, line separators and bidirectional
        # controls (`redaction.UNPRINTABLE`) would reach a terminal as they came.
        written = json.dumps(line, ensure_ascii=False, default=str)
        return redaction.UNPRINTABLE.sub(_json_escape, written)


def _json_escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"  # only ever inside a JSON string


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return redact(str(value))


def configure(level: str) -> dict[str, Any]:
    """Send every log line (ours and uvicorn's) through `JsonFormatter`; returns the
    `logging.config` dictionary, which uvicorn also takes as `log_config` for its workers."""
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            # Our access middleware logs each request once, with its id; uvicorn's own
            # access line would repeat it without one.
            "uvicorn.access": {"handlers": [], "propagate": False, "level": "WARNING"},
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
        },
    }
    logging.config.dictConfig(config)
    return config
