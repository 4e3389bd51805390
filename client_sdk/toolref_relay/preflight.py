"""What the relay checks of its `--gateway` at start: that it answers, that it is a toolref
gateway (`GET /v1/capabilities` in toolref's shape: its version, its upstream names), that it
accepts the relay's key, and that it has the upstreams `--switch` names.

A gateway that does not answer is no reason to stop (it may start later; `--fallback`
serves meanwhile). Anything else wrong would fail every turn, so `toolref relay` refuses to
start on it (`Preflight.problem`), saying what answered and what to point `--gateway` at;
`--no-gateway-check` starts anyway.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Final

import httpx
import pydantic

from toolref.registry.client import AsyncRegistryClient
from toolref.wire import endpoints
from toolref.wire.models import Capabilities

SHOWN_BYTES: Final = 200  # of a body that is not toolref's, in the message
OVERRIDE: Final = "to start anyway, add --no-gateway-check"


@dataclass(frozen=True, slots=True)
class Preflight:
    """What the check found.

    reached: the gateway answered at all.
    toolref: it answered capabilities in toolref's shape.
    version: the toolref release it runs (None: older, or not toolref).
    upstreams: its upstream names (None: not listed: an older gateway, or a key it refuses).
    key: why it refuses the relay's key (None: accepted, or not asked).
    problem: what would fail every turn, with the fix (None: nothing).
    line: the line to print about it.
    seconds: how long the check took.
    """

    gateway: str
    reached: bool
    toolref: bool = False
    version: str | None = None
    upstreams: tuple[str, ...] | None = None
    key: str | None = None
    problem: str | None = None
    line: str = ""
    seconds: float = 0.0

    def shown(self) -> dict[str, object]:
        """As JSON (`GET /toolref/check`, `toolref doctor`)."""
        upstreams = list(self.upstreams) if self.upstreams is not None else None
        return {
            "gateway": self.gateway,
            "reached": self.reached,
            "toolref": self.toolref,
            "version": self.version,
            "upstreams": upstreams,
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
    """Check `gateway` (see the module docstring): three requests at most, each within
    `request_timeout` seconds."""
    started = time.monotonic()
    headers = {"accept": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    async with httpx.AsyncClient(timeout=request_timeout) as http:
        try:
            answer = await http.get(gateway + endpoints.CAPABILITIES, headers=headers)
        except httpx.HTTPError as exc:
            then = (
                f"requests go to the fallback {fallback}"
                if fallback
                else "LLM requests are answered 502"
            )
            line = (
                f"toolref relay: the gateway {gateway} does not answer "
                f"({type(exc).__name__}); until it does, {then}"
            )
            return Preflight(gateway, False, line=line, seconds=_since(started))
    caps = _capabilities(answer)
    if caps is None:
        problem = not_a_gateway(gateway, answer)
        return Preflight(gateway, True, problem=problem, line=problem, seconds=_since(started))
    upstreams = tuple(caps.upstreams) if caps.upstreams is not None else None
    found = Preflight(gateway, True, True, caps.version, upstreams)
    registry = AsyncRegistryClient(gateway, api_key=key, timeout=request_timeout, retries=0)
    try:
        refused = await registry.verify()
    finally:
        await registry.aclose()
    trouble = _problem(found, key, refused, switch)
    line = trouble or _described(found)
    return Preflight(
        gateway, True, True, caps.version, upstreams, refused, trouble, line, _since(started)
    )


def _since(started: float) -> float:
    return time.monotonic() - started


def _capabilities(answer: httpx.Response) -> Capabilities | None:
    if answer.status_code != 200:
        return None
    try:
        return Capabilities.model_validate(answer.json())
    except (ValueError, pydantic.ValidationError):
        return None


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


def _described(found: Preflight) -> str:
    version = f" {found.version}" if found.version else ""
    if found.upstreams is None:
        names = "its upstreams not listed (a gateway older than the relay)"
    else:
        names = f"upstreams: {', '.join(found.upstreams)}"
    return f"toolref relay: gateway {found.gateway} is toolref{version}, key accepted; {names}"


def not_a_gateway(gateway: str, answer: httpx.Response) -> str:
    """What to say of `gateway` answering capabilities with `answer`, not toolref's."""
    shown = answer.content[:SHOWN_BYTES].decode("utf-8", "replace")
    more = "..." if len(answer.content) > SHOWN_BYTES else ""
    media = answer.headers.get("content-type", "no content type")
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
