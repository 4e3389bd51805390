"""`RelayConfig`: what `toolref relay` was started with, checked once."""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from toolref.kit.option_checks import nearest
from toolref.sending.backoff import LONGEST
from toolref.wire import redaction
from toolref.wire.endpoints import is_upstream_name

MIB: Final = 2**20
MIN_TOKEN: Final = 16  # characters of a control token given rather than drawn
KEY_VARIABLE: Final = "TOOLREF_KEY"  # the one variable the relay reads
CHANNEL_RETRY_MAX: Final = LONGEST  # --channel-retry-max's default (seconds)


def misspelt_key(environ: Mapping[str, str]) -> str | None:
    """With no key given: the `TOOLREF_*` variable set that most likely meant
    `TOOLREF_KEY` (`TOOLREF_KYE`), said as a line; else None. The relay refuses no other
    name: the service's settings may be set in the same shell."""
    names = [n for n in environ if n.upper().startswith("TOOLREF_") and n != KEY_VARIABLE]
    for name in sorted(names):
        if nearest(name.upper(), [KEY_VARIABLE]) is not None:
            return (
                f"toolref relay: no --key and no {KEY_VARIABLE}, but {name} is set; did you "
                f"mean {KEY_VARIABLE}? (the relay reads no other variable)"
            )
    return None


def base_url(option: str, value: str) -> str:
    """`value` without its trailing slash, once it is an http(s) URL with a host, a port
    (if any) of 1-65535 and no query or fragment (IPv6 hosts in brackets)."""
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError past 65535 or not a number
        host = parts.hostname
    except ValueError:  # `http://[::1` (an IPv6 host unclosed), `:abc`, `:99999`
        parts, port, host = None, None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not host
        or port == 0
        or parts.query
        or parts.fragment
        or "#" in value
    ):
        raise ValueError(
            f"{option} is {redaction.url(value)!r}, not an http(s) base URL; give one such as "
            "http://127.0.0.1:8750 (a host, a port of 1-65535 if any, IPv6 in brackets: "
            "http://[::1]:8750; no query string or fragment)"
        )
    return value.rstrip("/")


def key_problem(key: str) -> str | None:
    """Why `key` cannot travel as a header value (whitespace, a character outside
    printable ASCII), never quoting it; None: it can."""
    for at, char in enumerate(key):
        if not "!" <= char <= "~":
            return (
                f"the key (--key or {KEY_VARIABLE}) has {char!r} at index {at} of {len(key)}; "
                "a toolref key (trk_..., from toolref-server keygen) is printable ASCII "
                "without whitespace: give it alone, stripped (a key read from a file often "
                "ends with a newline)"
            )
    return None


def switch_problem(name: str) -> str | None:
    """Why `name` (of --switch) is no upstream name a gateway can have; None: it is."""
    if is_upstream_name(name):
        return None
    return (
        f"--switch names {name!r}, not an upstream name: a gateway's names are 1-64 of "
        "A-Z a-z 0-9 _ . - (not . or .., which would leave /llm/); give names as the "
        "gateway knows them, comma-separated (anthropic,kimi)"
    )


_TOKEN_BYTES: Final = 32


def new_token() -> str:
    """A control token for this start (43 URL-safe characters, 256 random bits)."""
    return secrets.token_urlsafe(_TOKEN_BYTES)


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """gateway: the toolref service the relay sends to (its `/llm/{name}/...` gateway and
        its registry API share this base URL).
    key: the tenant's toolref key, sent as `Toolref-Key` (never to `fallback`, never logged).
    fallback: the provider's own base URL (https://api.anthropic.com), where the agent's
        request goes unchanged when the gateway cannot be reached; None answers 502 instead.
    switch: upstream names the relay may switch between (the first is selected at start).
    max_body_bytes: the most an agent's LLM request may take on the wire.
    max_inflated_bytes: the most a gzip or zstd LLM request may inflate to.
    max_inflated_in_flight: the most the LLM requests whose answers have not begun may hold
        at once, as sent and inflated (`toolref.asgi.budget`, `bodies.Held`: a streaming
        answer holds no body); past it a turn is answered 503 with Retry-After.
        At least the two limits above together, so any one turn within them can be served.
    connect_timeout / read_timeout: seconds to connect, and to wait between two pieces of
        an answer (a model may think for minutes before its first token).
    send_timeout: seconds a WebSocket side may take nothing the relay sends it before it is
        let go (`--send-timeout`): an agent that reads nothing (`toolref.asgi.paced`, the
        relay's WebSocket protocol) and either side of a bridged socket (1001,
        `toolref.websocket.bridge`), as the service's `TOOLREF_SEND_TIMEOUT` does.
    max_clients: clients (an upstream and a provider credential) whose state is kept; the
        least recently used is dropped first (`clients`).
    channel: send LLM requests to the gateway over one WebSocket (`channel`: no HTTP head
        per turn), HTTP while the gateway refuses it; False: always HTTP.
    channel_retry_max: the most seconds the relay sends over HTTP before trying a channel
        again after failures in a row to have one (`--channel-retry-max`; the back-off,
        `toolref.sending.backoff`, waits 30 s x 2^(n-1) after the n-th, at most this; one
        below 30 s is every wait).
    edits: send LLM requests as edits when the gateway takes them (`edited`); False sends
        them as they came.
    size_guard: each inline segment of an edit compressed in a context of its own (the
        default), so that its size tells nothing of what else the conversation holds;
        False compresses them against the conversation (smaller, for a link whose sizes
        no one else can see: `--no-size-guard`; docs/reliability.md, "Sizes").
    context_editing: True asks the gateway to replace old tool results by their summaries
        (`Toolref-Context-Editing: on`, `--context-editing`), False refuses it (`off`,
        `--no-context-editing`); None leaves it to the gateway's operator.
    max_recipes / max_recipe_bytes: the recipes each client's editor keeps, and the bytes
        they may hold together (`toolref.sending.recipes`): the relay holds at most
        max_clients x max_recipe_bytes of them.
    token: the control token `/metrics`, `/toolref/switch` and `Toolref-Switch` need (one
        drawn at each start by default; never logged).
    token_file: where `toolref relay` wrote the token: the answers that ask for it name
        it, and the relay deletes it when it stops (if it still holds this token).
    """

    gateway: str
    key: str | None = field(default=None, repr=False)
    fallback: str | None = None
    switch: tuple[str, ...] = ()
    max_body_bytes: int = 64 * MIB
    max_inflated_bytes: int = 64 * MIB
    max_inflated_in_flight: int = 256 * MIB
    connect_timeout: float = 5.0
    read_timeout: float = 600.0
    send_timeout: float = 30.0  # toolref.asgi.paced.SEND_TIMEOUT (uvicorn not imported here)
    max_clients: int = 8
    edits: bool = True
    channel: bool = True
    channel_retry_max: float = CHANNEL_RETRY_MAX
    size_guard: bool = True
    context_editing: bool | None = None
    max_recipes: int = 64
    max_recipe_bytes: int = 32 * MIB
    token: str = field(default_factory=new_token, repr=False)
    token_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gateway", base_url("--gateway", self.gateway))
        if self.fallback is not None:
            object.__setattr__(self, "fallback", base_url("--fallback", self.fallback))
        if self.key is not None and (problem := key_problem(self.key)) is not None:
            raise ValueError(problem)
        for name in self.switch:
            if (problem := switch_problem(name)) is not None:
                raise ValueError(problem)
        if len(set(self.switch)) != len(self.switch):
            raise ValueError(f"--switch names an upstream twice ({','.join(self.switch)})")
        for option, number in (
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-inflated-bytes", self.max_inflated_bytes),
            ("--max-clients", self.max_clients),
            ("--max-recipes", self.max_recipes),
            ("--max-recipe-bytes", self.max_recipe_bytes),
        ):
            if number < 1:
                raise ValueError(f"{option} is {number}; give a positive number")
        if len(self.token) < MIN_TOKEN:
            raise ValueError(
                f"the control token has {len(self.token)} characters; give at least "
                f"{MIN_TOKEN} (or none: one is drawn at each start)"
            )
        largest = self.max_body_bytes + self.max_inflated_bytes  # as sent, and inflated
        if self.max_inflated_in_flight < largest:
            raise ValueError(
                f"--max-inflated-in-flight is {self.max_inflated_in_flight}, below what one "
                f"turn may hold ({largest}: --max-body-bytes plus --max-inflated-bytes), so "
                "such a turn could never be served; give a few times that"
            )
        if not (math.isfinite(self.send_timeout) and self.send_timeout > 0):
            raise ValueError(
                f"--send-timeout is {self.send_timeout}; give a number of seconds above 0, "
                "such as 30 (the default): a WebSocket side that takes nothing for that long "
                "is let go"
            )
        if not (math.isfinite(self.channel_retry_max) and self.channel_retry_max > 0):
            raise ValueError(
                f"--channel-retry-max is {self.channel_retry_max}; give a number of seconds "
                f"above 0, such as {CHANNEL_RETRY_MAX:g} (the default): the most the relay "
                "waits, sending over HTTP, before trying the gateway's channel again"
            )
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError(
                f"timeouts are {self.connect_timeout} and {self.read_timeout} seconds; "
                "give positive numbers"
            )
