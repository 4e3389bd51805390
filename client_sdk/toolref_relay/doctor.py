"""`toolref doctor`: one probe through the whole chain, each hop reported with its status
and time. Spends no tokens: it only lists models.

1. the relay answers `GET /toolref/check` (with this start's control token, read from the
   file the relay wrote);
2. the relay's gateway answers, as a toolref gateway (its version) — checked by the relay
   itself, from where it runs;
3. the gateway accepts the relay's key (or runs without API keys);
4. each upstream the gateway lists answers `GET /llm/NAME/v1/models` through relay and
   gateway. The provider's own answer counts, whatever its status (a 401 asks for the
   agent's provider key, which doctor never sends); a refusal by the relay or the gateway
   (their errors carry a `toolref_` code) fails the hop.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import httpx

from toolref.registry.bounded import aread_within

from .control import CHECK_PATH
from .preflight import MOST_BYTES

MODELS_PATH: Final = "/v1/models"
SHOWN_CHARS: Final = 300  # of an error message, in a hop's line


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop of the chain: what was checked, whether it passed, the status seen (None:
    no HTTP answer), how long it took (None: not timed apart), and what was found."""

    name: str
    ok: bool
    status: int | None
    seconds: float | None
    detail: str


async def probe(relay: str, token: str | None, *, request_timeout: float = 10.0) -> list[Hop]:
    """The hops of the chain behind the relay at `relay` (stops at the first that fails
    before the upstreams; every upstream is probed). Each answer's body is read within
    `request_timeout` seconds for the whole and `preflight.MOST_BYTES` (a provider's models
    list longer than that is judged by its status: a refusal of the chain's is small)."""
    # Straight to the relay (on loopback), never through a proxy of the environment.
    async with httpx.AsyncClient(timeout=request_timeout, trust_env=False) as http:
        hops, check = await _relay_hop(http, relay, token, request_timeout)
        if check is None:
            return hops
        hops += _gateway_hops(check)
        if not all(hop.ok for hop in hops):
            return hops
        for name in check.get("upstreams") or []:
            hops.append(await _upstream_hop(http, relay, str(name), request_timeout))
        if not check.get("upstreams"):
            hops.append(Hop("upstreams", False, None, None, "the gateway lists none"))
    return hops


async def _got(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], within: float
) -> tuple[httpx.Response, bytes | None]:
    """`GET url`, and its body when whole within `within` seconds and `MOST_BYTES` (None:
    it did not end so; its connection closed)."""
    answer = await http.send(http.build_request("GET", url, headers=headers), stream=True)
    return answer, await aread_within(answer, within, MOST_BYTES)


def _unended(within: float) -> str:
    return f"its answer did not end within {within:g} s and {MOST_BYTES} bytes"


async def _relay_hop(
    http: httpx.AsyncClient, relay: str, token: str | None, within: float
) -> tuple[list[Hop], dict[str, Any] | None]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    started = time.monotonic()
    try:
        answer, body = await _got(http, relay + CHECK_PATH, headers, within)
    except httpx.HTTPError as exc:
        detail = (
            f"no relay answers at {relay} ({type(exc).__name__}); start it "
            "(toolref relay --gateway URL), or give its address with --relay"
        )
        return [Hop(f"relay {relay}", False, None, None, detail)], None
    seconds = time.monotonic() - started
    if answer.status_code == 401:
        detail = (
            "it wants this start's control token: run doctor as the user who started it, or "
            "give --token-file"
        )
        return [Hop(f"relay {relay}", False, 401, seconds, detail)], None
    if body is None:
        detail = f"answered {answer.status_code}, but {_unended(within)}: not a toolref relay"
        return [Hop(f"relay {relay}", False, answer.status_code, seconds, detail)], None
    try:
        check = json.loads(body)
    except ValueError:
        check = None
    if answer.status_code != 200 or not isinstance(check, dict) or "gateway" not in check:
        detail = f"answered {answer.status_code} {answer.text[:SHOWN_CHARS]!r}: not a toolref relay"
        return [Hop(f"relay {relay}", False, answer.status_code, seconds, detail)], None
    # The relay's own time: the answer's, less the gateway's check it waited for.
    own = max(0.0, seconds - float(check.get("seconds") or 0.0))
    relay_hop = Hop(f"relay {relay}", True, 200, own, f"toolref {check.get('relay')}")
    return [relay_hop], check


def _gateway_hops(check: dict[str, Any]) -> list[Hop]:
    """Hops 2 and 3, as the relay found them."""
    gateway = f"gateway {check['gateway']}"
    seconds = float(check.get("seconds") or 0.0)
    if not check.get("reached"):
        return [Hop(gateway, False, None, seconds, str(check.get("line")))]
    if not check.get("toolref"):
        return [Hop(gateway, False, None, seconds, str(check.get("problem")))]
    version = check.get("version") or "(version not told: an older gateway)"
    hops = [Hop(gateway, True, 200, seconds, f"toolref {version}")]
    refused = check.get("key")
    if refused:
        hops.append(Hop("key", False, None, None, str(check.get("problem"))))
        return hops
    keyless = "not needed: the gateway runs without API keys (one local tenant)"
    hops.append(Hop("key", True, None, None, keyless if check.get("keys") is False else "accepted"))
    problem = check.get("problem")
    if problem:  # no upstreams, or --switch names one it lacks
        hops.append(Hop("upstreams", False, None, None, str(problem)))
    return hops


async def _upstream_hop(http: httpx.AsyncClient, relay: str, name: str, within: float) -> Hop:
    hop = f"upstream {name} (GET /llm/{name}{MODELS_PATH})"
    started = time.monotonic()
    try:
        answer, body = await _got(http, f"{relay}/llm/{name}{MODELS_PATH}", {}, within)
    except httpx.HTTPError as exc:
        return Hop(hop, False, None, None, f"the relay broke off ({type(exc).__name__})")
    seconds = time.monotonic() - started
    # Not whole within the bound: no refusal of the chain's (a problem's size), the provider's.
    refusal = chain_refusal(body) if body is not None else None
    if refusal is not None:
        return Hop(hop, False, answer.status_code, seconds, refusal[:SHOWN_CHARS])
    if answer.status_code < 400:
        return Hop(hop, True, answer.status_code, seconds, "the provider answers")
    note = " (it wants the agent's provider key; doctor sends none)"
    said = note if answer.status_code in (401, 403) else " (its own answer: the chain reaches it)"
    return Hop(hop, True, answer.status_code, seconds, f"the provider answers{said}")


def chain_refusal(body: bytes) -> str | None:
    """The message of an error the relay or the gateway made (a `toolref_` code, or a
    message starting with `toolref`), in any provider's shape; None for the provider's."""
    try:
        value: Any = json.loads(body)
    except ValueError:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return None
    message = str(error.get("message", ""))
    if str(error.get("code", "")).startswith("toolref") or message.startswith("toolref"):
        return message
    return None


def report(hops: list[Hop], say: Callable[[str], None]) -> bool:
    """Say each hop, one line each; whether all passed."""
    width = max((len(hop.name) for hop in hops), default=0)
    for hop in hops:
        verdict = "ok    " if hop.ok else "FAILED"
        status = f"  {hop.status}" if hop.status is not None else ""
        took = f"  {hop.seconds * 1000:.0f} ms" if hop.seconds is not None else ""
        say(f"toolref doctor: {hop.name:<{width}}  {verdict}{status}{took}  {hop.detail}")
    passed = bool(hops) and all(hop.ok for hop in hops)
    say("toolref doctor: " + ("every hop answers" if passed else "a hop failed (above)"))
    return passed
