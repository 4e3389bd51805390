"""What the relay checks of its `--gateway` at start: that it answers, that it is a toolref
gateway (`GET /v1/capabilities` in toolref's shape: its version, its upstream names), whether
it wants API keys and accepts the relay's, and that it has the upstreams `--switch` names.

The check goes where the turns go: straight to the gateway, never through a proxy named
in the environment (`direct`).

Anything wrong would fail every turn, so `toolref relay` refuses to start on it
(`Preflight.problem`), saying what answered (or that nothing did, and why: a connection
refused, a name not known, no answer in time) and what to point `--gateway` at;
`--no-gateway-check` starts anyway (a gateway that is not up yet, with `--fallback` serving
meanwhile).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
import pydantic

from toolref.registry.bounded import aread_within
from toolref.registry.client import AsyncRegistryClient
from toolref.wire import endpoints
from toolref.wire.models import Capabilities

SHOWN_BYTES: Final = 200  # of a body that is not toolref's, in the message
# The most read of one answer the check (and `toolref doctor`) reads to judge, within its
# `request_timeout` for the whole: a gateway's capabilities are a few KiB (its upstreams'
# names), so this leaves room; an endless or trickled body costs neither memory nor a hang.
MOST_BYTES: Final = 2**20
OVERRIDE: Final = "to start anyway, add --no-gateway-check"
OVERRIDDEN: Final = "started anyway (--no-gateway-check)"


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the check found.

    reached: the gateway answered at all.
    toolref: it answered capabilities in toolref's shape.
    version: the toolref release it runs (None: older, or not toolref).
    upstreams: its upstream names (None: not listed: an older gateway, or a key it refuses).
    keys: it wants API keys (False: it runs without them, as one local tenant; None: not
        known).
    key: why it refuses the relay's key (None: accepted, or not asked).
    problem: what would fail every turn, with the fix (None: nothing).
    line: the line to print about it.
    seconds: how long the check took.
    keep_alive: the seconds it keeps an idle connection (None: not said).
    """

    gateway: str
    reached: bool
    toolref: bool = False
    version: str | None = None
    upstreams: tuple[str, ...] | None = None
    keys: bool | None = None
    key: str | None = None
    problem: str | None = None
    line: str = ""
    seconds: float = 0.0
    keep_alive: int | None = None

    def shown(self) -> dict[str, object]:
        """As JSON (`GET /toolref/check`, `toolref doctor`)."""
        upstreams = list(self.upstreams) if self.upstreams is not None else None
        return {
            "gateway": self.gateway,
            "reached": self.reached,
            "toolref": self.toolref,
            "version": self.version,
            "upstreams": upstreams,
            "keys": self.keys,
            "key": self.key,
            "problem": self.problem,
            "line": self.line,
            "seconds": round(self.seconds, 4),
        }


async def check(
    gateway: str,
    key: str | None,
    *,
    switch: tuple[str, ...] = (),
    fallback: str | None = None,
    request_timeout: float = 5.0,
) -> Preflight:
    """Check `gateway` (see the module docstring): three requests at most, each answer's
    body whole within `request_timeout` seconds and `MOST_BYTES` (a gateway's are
    a few KiB; `aread_within`). Capabilities are asked without a key first: a gateway that
    lists its upstreams to anyone runs without API keys."""
    started = time.monotonic()
    # Straight to the gateway, as every turn goes (`direct`): a proxy of the environment
    # must not decide what the check finds.
    async with httpx.AsyncClient(timeout=request_timeout, trust_env=False) as http:
        try:
            answer, body = await _get(http, gateway, _ACCEPT, request_timeout)
        except httpx.HTTPError as exc:
            problem = unreachable(gateway, exc, request_timeout, fallback)
            return Preflight(gateway, False, problem=problem, line=problem, seconds=_since(started))
        caps = _capabilities(answer, body)
        if caps is None:
            problem = not_a_gateway(gateway, answer, body, request_timeout)
            return Preflight(gateway, True, problem=problem, line=problem, seconds=_since(started))
        if caps.upstreams is not None:  # listed to anyone: no API keys there
            found = Preflight(
                gateway,
                True,
                True,
                caps.version,
                tuple(caps.upstreams),
                False,
                keep_alive=caps.limits.keep_alive_seconds,
            )
            return _finished(found, key, None, switch, started)
        if key:  # with the key: the names it may see
            headers = {**_ACCEPT, "authorization": f"Bearer {key}"}
            try:
                answer, body = await _get(http, gateway, headers, request_timeout)
            except httpx.HTTPError:
                pass  # verify says what is wrong
            else:
                caps = _capabilities(answer, body) or caps
    upstreams = tuple(caps.upstreams) if caps.upstreams is not None else None
    registry = AsyncRegistryClient(
        gateway, api_key=key, timeout=request_timeout, retries=0, transport=direct()
    )
    try:
        refused = await registry.verify()
    finally:
        await registry.aclose()
    # Unlisted without a key, yet accepted without one: an older gateway without keys.
    keys = True if key or refused is not None else None
    found = Preflight(
        gateway,
        True,
        True,
        caps.version,
        upstreams,
        keys,
        keep_alive=caps.limits.keep_alive_seconds,
    )
    return _finished(found, key, refused, switch, started)


_ACCEPT: Final = {"accept": "application/json"}


async def _get(
    http: httpx.AsyncClient, gateway: str, headers: dict[str, str], within: float
) -> tuple[httpx.Response, bytes | None]:
    """The gateway's capabilities answer, and its body when whole within `within` seconds
    and `MOST_BYTES` (None: it did not end so; its connection closed)."""
    request = http.build_request("GET", gateway + endpoints.CAPABILITIES, headers=headers)
    answer = await http.send(request, stream=True)
    return answer, await aread_within(answer, within, MOST_BYTES)


def direct() -> httpx.AsyncHTTPTransport:
    """A connection pool that reaches its hosts directly. The relay's turns, its start's
    check and `toolref doctor` all go that way: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
    NO_PROXY are not read (httpx's clients would read them, its transports do not), so the
    check never passes or fails through a proxy the turns do not take."""
    return httpx.AsyncHTTPTransport()


def _finished(
    found: Preflight, key: str | None, refused: str | None, switch: tuple[str, ...], started: float
) -> Preflight:
    trouble = _problem(found, key, refused, switch)
    return dataclasses.replace(
        found,
        key=refused,
        problem=trouble,
        line=trouble or _described(found, key),
        seconds=_since(started),
    )


def _since(started: float) -> float:
    return time.monotonic() - started


def _capabilities(answer: httpx.Response, body: bytes | None) -> Capabilities | None:
    if answer.status_code != 200 or body is None:
        return None
    try:
        return Capabilities.model_validate_json(body)
    except (ValueError, pydantic.ValidationError):
        return None


def unreachable(gateway: str, error: httpx.HTTPError, timeout: float, fallback: str | None) -> str:
    """What to say of a `--gateway` that gave no HTTP answer (`error`), with the fix."""
    then = f"go to the fallback {fallback}" if fallback else "are answered 502"
    return (
        f"toolref relay: the gateway {gateway} does not answer: {what_failed(error, timeout)}. "
        "Check the URL and its port (the service listens on http://127.0.0.1:8750 unless "
        "told otherwise: `make serve`, or `toolref-server serve --port N`), start the service "
        f"there, then start the relay again; {OVERRIDE}: until the gateway answers, LLM "
        f"requests {then}"
    )


def what_failed(error: httpx.HTTPError, timeout: float) -> str:
    """`error` of a request that got no HTTP answer, as a person says it."""
    if isinstance(error, httpx.TimeoutException):
        return f"nothing came back within {timeout:g} s ({type(error).__name__})"
    if isinstance(error, httpx.RemoteProtocolError | httpx.LocalProtocolError):
        return f"what listens there does not speak HTTP ({error})"
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing listens on that port)"
        if isinstance(cause, socket.gaierror):
            return f"its host name is not known ({cause.strerror or cause})"
        if isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "reason", None) or cause
            return f"TLS failed ({reason}; an http:// service given as https://?)"
        cause = cause.__cause__ or cause.__context__
    return f"{type(error).__name__}: {error}"


def _problem(
    found: Preflight, key: str | None, refused: str | None, switch: tuple[str, ...]
) -> str | None:
    gateway = found.gateway
    if refused is not None:
        which = "the relay's key" if key else "a request without a key"
        return (
            f"toolref relay: the gateway {gateway} refuses {which} ({refused}); start the "
            "relay with the tenant's toolref key (TOOLREF_KEY, or --key), whose SHA-256 the "
            f"gateway's TOOLREF_API_KEYS holds (not the provider's key); {OVERRIDE}"
        )
    if found.upstreams is None:
        return None  # an older gateway: nothing more to check
    if not found.upstreams:
        return (
            f"toolref relay: the gateway {gateway} has no upstreams, so it would refuse every "
            "LLM request; set TOOLREF_UPSTREAMS where it runs (such as "
            f"anthropic=https://api.anthropic.com,openai=https://api.openai.com); {OVERRIDE}"
        )
    missing = [name for name in switch if name not in found.upstreams]
    if missing:
        return (
            f"toolref relay: --switch names {', '.join(missing)}, which the gateway {gateway} "
            f"does not have (it has {', '.join(found.upstreams)}); {OVERRIDE}"
        )
    return None


def _described(found: Preflight, key: str | None) -> str:
    version = f" {found.version}" if found.version else ""
    if found.upstreams is None:
        names = "its upstreams not listed (a gateway older than the relay)"
    else:
        names = f"upstreams: {', '.join(found.upstreams)}"
    if found.keys:
        keys = "key accepted"
    elif key:
        keys = "without API keys (one local tenant: it takes any key, the relay's too)"
    else:
        keys = "without API keys (one local tenant: no key needed)"
    return f"toolref relay: gateway {found.gateway} is toolref{version}, {keys}; {names}"


def not_a_gateway(
    gateway: str, answer: httpx.Response, body: bytes | None = b"", within: float = 0.0
) -> str:
    """What to say of `gateway` answering capabilities with `answer`, not toolref's (`body`:
    its body; None: one that did not end within `within` seconds and `MOST_BYTES`)."""
    media = answer.headers.get("content-type", "no content type")
    if body is None:
        return (
            f"toolref relay: --gateway {gateway} is not a toolref gateway: GET "
            f"{endpoints.CAPABILITIES} answered {answer.status_code} ({media}) with a body "
            f"that did not end within {within:g} s and {MOST_BYTES} bytes (a toolref "
            "gateway's is a few KiB). Point --gateway at the toolref service (where "
            f"`toolref-server serve` listens, such as http://127.0.0.1:8750); {OVERRIDE}"
        )
    shown = body[:SHOWN_BYTES].decode("utf-8", "replace")
    more = "..." if len(body) > SHOWN_BYTES else ""
    if answer.status_code in (502, 503, 504) and "json" not in media:
        server = answer.headers.get("server") or "a proxy"
        return (
            f"toolref relay: --gateway {gateway} is a proxy ({server}) whose gateway behind "
            f"it does not answer: GET {endpoints.CAPABILITIES} answered {answer.status_code} "
            f"({media}) from the proxy itself. Start toolref-server where the proxy points "
            f"(nginx: its proxy_pass), or point --gateway at the service; {OVERRIDE}"
        )
    return (
        f"toolref relay: --gateway {gateway} is not a toolref gateway: GET "
        f"{endpoints.CAPABILITIES} answered {answer.status_code} ({media}) {shown!r}{more}, "
        f"so it is {who_answered(answer)}. Point --gateway at the toolref service (where "
        "`toolref-server serve` listens, such as http://127.0.0.1:8750); a provider's URL "
        "goes in that service's TOOLREF_UPSTREAMS, or in the relay's --fallback; "
        f"{OVERRIDE}"
    )


def who_answered(answer: httpx.Response) -> str:
    """The kind of server `answer` came from, as far as its error shape tells."""
    try:
        body: Any = json.loads(answer.content)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        if body.get("type") == "error":
            return "Anthropic's API, or one with its error shape"
        if "status" in error and "code" in error:
            return "Google's Gemini API, or one with its error shape"
        return "OpenAI's API, or one with its error shape"
    server = answer.headers.get("server")
    return f"another server ({server})" if server else "another server"
