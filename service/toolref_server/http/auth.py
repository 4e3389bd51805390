"""API keys to tenants: `Authorization: Bearer <key>`, keys configured as SHA-256 hashes;
who may read the metrics endpoints (`/metrics`, `/v1/savings`); and the one rule for a
`Host` that names this machine's loopback (`foreign_host`), which those endpoints keep
without their own key and a service without API keys keeps for every request
(`toolref_server.http.hosts`)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from typing import Final

from starlette.requests import HTTPConnection

from toolref.wire.errors import AuthenticationError, ForbiddenError
from toolref_server.settings import LOCAL_TENANT, Settings

# Headers a proxy adds to what it passes on (RFC 7239's, the de facto X-Forwarded-* and
# X-Real-IP, RFC 9110's Via): a request that carries one did not come straight from here.
PROXY_HEADERS: Final = (
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "via",
)
# A `Host` value: a name or IPv4 address, or an IPv6 address in brackets; a port if any.
_HOST: Final = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[0-9a-z.-]+))(?::[0-9]{0,5})?")
_SHOWN: Final = 80  # characters of a refused Host quoted back
KEYGEN: Final = "toolref-server keygen TENANT"
_MAKE_KEY: Final = (
    "make a key (`openssl rand -hex 32`), set TOOLREF_METRICS_KEY to its SHA-256 "
    "(`toolref-server hash-key KEY` prints it) and restart the service, then send "
    "`Authorization: Bearer KEY`"
)


class Authenticator:
    """Maps a request to its tenant, or raises `AuthenticationError`."""

    def __init__(self, settings: Settings) -> None:
        self._hashes = [(bytes.fromhex(h), tenant) for h, tenant in settings.key_hashes.items()]
        self.open = not self._hashes  # loopback with no keys: one local tenant
        self._metrics = bytes.fromhex(settings.metrics_key) if settings.metrics_key else None

    @property
    def metrics_secured(self) -> bool:
        return self._metrics is not None

    def check_metrics(self, request: HTTPConnection) -> None:
        """GET /metrics (and the savings data): the bearer key TOOLREF_METRICS_KEY hashes;
        without one configured, requests made on this machine (`elsewhere`) for a loopback
        name (`foreign_host`: not a name a web page points at this machine) only, else 403
        saying how to set a key."""
        path = request.url.path
        if self._metrics is None:
            where = elsewhere(request)
            if where is not None:
                raise ForbiddenError(
                    f"GET {path} answers only requests made on the service's own "
                    f"machine while TOOLREF_METRICS_KEY is not set, and this one came {where}. "
                    f"To read it from elsewhere, {_MAKE_KEY}"
                )
            host = foreign_host(request)
            if host is not None:
                raise ForbiddenError(
                    f"GET {path} answers only requests for this machine's loopback names "
                    "(Host localhost, 127.0.0.1 or [::1], any port) while TOOLREF_METRICS_KEY "
                    f"is not set, and this one is for Host {host}: a web page that points a "
                    "name of its own at this machine (DNS rebinding) sends such requests. Ask "
                    f"for http://127.0.0.1:PORT{path} (or localhost); to read it by another "
                    f"name, {_MAKE_KEY}"
                )
            return
        presented = _presented(request)
        if presented is None:
            raise AuthenticationError(
                f"GET {request.url.path} needs a key here: send `Authorization: Bearer <key>` "
                "with the key whose SHA-256 is TOOLREF_METRICS_KEY"
            )
        if not hmac.compare_digest(presented, self._metrics):
            raise AuthenticationError(
                "the key is not the metrics key of this registry; send the key whose SHA-256 "
                "is TOOLREF_METRICS_KEY",
                invalid_token=True,
            )

    def tenant_for(self, request: HTTPConnection) -> str:
        if self.open:
            return LOCAL_TENANT
        presented = _presented(request)
        if presented is None:
            raise AuthenticationError(
                "send `Authorization: Bearer <key>` with an API key of this registry "
                f"(`{KEYGEN}` makes one, and the TOOLREF_API_KEYS entry for it)"
            )
        found = self._tenant_of(presented)
        if found is None:
            raise AuthenticationError(
                "the API key is not known to this registry; check the key, or ask the operator "
                f"to add its hash to TOOLREF_API_KEYS (`{KEYGEN}` makes a key and its entry)",
                invalid_token=True,
            )
        return found

    def known_tenant(self, authorization: str | None) -> str:
        """The tenant whose key an `Authorization: Bearer` header value bears, "" for none
        known (a request its route refuses 401, or one of an endpoint without a key): what
        admission counts a request against before its route checks the key. O(the header
        and the tenants' keys)."""
        if self.open:
            return LOCAL_TENANT
        presented = _bearer(authorization)
        found = None if presented is None else self._tenant_of(presented)
        return found or ""

    def tenant_for_key(self, key: str | None, *, header: str) -> str:
        """The tenant of a key sent alone in `header` (the gateway's `Toolref-Key`: there
        `Authorization` is the provider's). A refusal names the header, what to send in it
        and how to get a key: an official SDK shows nothing else of it but "401"."""
        if self.open:
            return LOCAL_TENANT
        if not key:
            raise AuthenticationError(
                f"no {header} header: the toolref gateway needs this service's API key in "
                f"`{header}: <key>`, besides the provider's own key (which stays in "
                f"Authorization or x-api-key); `{KEYGEN}` makes a key and the TOOLREF_API_KEYS "
                "entry that lets the service know it",
                key_header=header,
            )
        found = self._tenant_of(hashlib.sha256(key.encode()).digest())
        if found is None:
            raise AuthenticationError(
                f"the key in the {header} header is not known to this toolref gateway; send "
                f"`{header}: <key>` with a key whose SHA-256 is in the service's TOOLREF_API_KEYS "
                f"(`{KEYGEN}` makes a key and that entry). It is toolref's key, not the "
                "provider's, which stays in Authorization or x-api-key",
                invalid_token=True,
                key_header=header,
            )
        return found

    def _tenant_of(self, presented: bytes) -> str | None:
        """The tenant of the key whose SHA-256 is `presented`; None when no tenant has it."""
        found: str | None = None
        # Compare against every hash, without stopping early, so timing says nothing.
        for digest, tenant in self._hashes:
            if hmac.compare_digest(presented, digest):
                found = tenant
        return found


def elsewhere(request: HTTPConnection) -> str | None:
    """Where a request came from, said for a refusal, unless it came straight from this
    machine: a loopback peer (127.0.0.0/8, ::1, ::ffff:127.x) and no proxy header. The peer
    is the socket's: uvicorn replaces it with an `X-Forwarded-For` address only when that
    header is there, which refuses the request anyway. A proxy on this machine that adds no
    such header (a TCP proxy, a tunnel) makes each of its clients local: set a key there."""
    for name in PROXY_HEADERS:
        if name in request.headers:
            return f"through a proxy (it carries {name.title()})"
    peer = request.client.host if request.client is not None else None
    if peer is None:
        return "from an unknown address"
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return f"from {peer!r}, not a loopback address"
    return None if loopback(address) else f"from {peer}, not a loopback address"


def foreign_host(request: HTTPConnection) -> str | None:
    """The request's `Host`, quoted for a refusal, unless it names this machine's loopback:
    `localhost` or a loopback address (as `elsewhere` counts them), with any port or none,
    in any case. A web page can reach a loopback port by a name of its own that it points
    at 127.0.0.1 after it loaded (DNS rebinding), and read the answer as its own; its
    requests then carry `Host: that.name`. No Host, or several, is refused too. Kept by
    `/metrics` and `/v1/savings` without TOOLREF_METRICS_KEY, and by every request to a
    service without API keys (`toolref_server.http.hosts.KeylessHosts`)."""
    hosts = request.headers.getlist("host")
    if len(hosts) == 1 and _loopback_host(hosts[0]):
        return None
    if not hosts:
        return "(none)"
    shown = ", ".join(hosts)
    return repr(shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "...")


def _loopback_host(host: str) -> bool:
    """Whether a `Host` value names a loopback address or `localhost`."""
    match = _HOST.fullmatch(host.strip().lower())
    if match is None:
        return False
    name = match["name"]
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name if name is not None else match["v6"])
    except ValueError:
        return False
    if (name is None) != isinstance(address, ipaddress.IPv6Address):  # `[1.2.3.4]`, `::1`
        return False
    return loopback(address)


def loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """127.0.0.0/8, ::1, and an IPv4-mapped IPv6 address of the former."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _presented(request: HTTPConnection) -> bytes | None:
    """The SHA-256 of the request's bearer key, or None when it sends none."""
    return _bearer(request.headers.get("authorization"))


def _bearer(authorization: str | None) -> bytes | None:
    """The SHA-256 of the key an `Authorization` value bears, or None when it bears none."""
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return hashlib.sha256(key.strip().encode()).digest()


def hash_key(key: str) -> str:
    """The hex SHA-256 of an API key, as TOOLREF_API_KEYS holds it."""
    return hashlib.sha256(key.encode()).hexdigest()
