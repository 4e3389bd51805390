"""Which requests the relay serves: those for its own address (the `Host` it is reached
by), none that a web page sent (an `Origin`), and none whose path has a dot segment.

A web page cannot reach a loopback port by its address, but it can by a name of its own
that it points at 127.0.0.1 after the page loaded (DNS rebinding): its requests then carry
`Host: evil.example:8760`, and the relay refuses them. Browsers add `Origin` to every
cross-site request a page can make with a body (`fetch`, a form); agents and their SDKs
never send one, so the relay refuses any request that has one. Pure functions.
"""

from __future__ import annotations

from typing import Final

# The names a loopback relay is reached by; a relay bound elsewhere is reached by its
# address too.
LOOPBACK: Final = ("127.0.0.1", "localhost", "[::1]")
_LOOPBACK_ADDRESSES: Final = frozenset({"127.0.0.1", "::1", "localhost"})
_SHOWN: Final = 80  # characters of a refused header's value quoted back


def served_hosts(server: tuple[str, int | None] | None) -> frozenset[str] | None:
    """The `Host` values a relay listening at `server` (the ASGI scope's: the address the
    connection reached) serves, lowercase; None when it listens on no TCP port (a Unix
    socket: no page can reach it)."""
    if server is None or server[1] is None:
        return None
    address, port = server
    names = list(LOOPBACK)
    if address.lower() not in _LOOPBACK_ADDRESSES:  # bound beyond loopback (or a test's)
        names.append(f"[{address}]" if ":" in address else address)
    hosts = {f"{name.lower()}:{port}" for name in names}
    if port == 80:  # a client leaves the default port out
        hosts |= {name.lower() for name in names}
    return frozenset(hosts)


def host_refusal(host: str | None, server: tuple[str, int | None] | None) -> str | None:
    """Why a request with this `Host` is refused (None: served)."""
    served = served_hosts(server)
    if served is None or (host is not None and host.strip().lower() in served):
        return None
    listed = ", ".join(sorted(served))
    return (
        f"toolref relay: this relay serves requests for {listed}, not Host {_shown(host)}: "
        "a web page that points a name of its own at this machine (DNS rebinding) sends "
        f"such requests. Point the agent at http://{sorted(served)[0]}/llm/NAME"
    )


def origin_refusal(origin: str | None) -> str | None:
    """Why a request with this `Origin` header is refused (None: it has none)."""
    if origin is None:
        return None
    return (
        f"toolref relay: a request with an Origin header ({_shown(origin)}) comes from a web "
        "page, and the relay serves none: agents and their SDKs send no Origin, browsers do. "
        "Send it from the agent, curl or a script"
    )


def path_refusal(raw_path: str) -> str | None:
    """Why a request for `raw_path` (as the agent sent it) is refused: a dot segment (`.`,
    `..`), which the relay's HTTP client would resolve before the gateway could see it
    (`/llm/a/../../v1/invocations:resolve` reached the gateway's registry API with the
    tenant's key, past the gateway's own check for dot segments); None: served. Any other
    path goes on as it was sent (an encoded `%2e%2e` too: the gateway refuses it)."""
    if not any(segment in (".", "..") for segment in raw_path.split("/")):
        return None
    return (
        f"toolref relay: the path {_shown(raw_path)} has a dot segment (. or ..), which "
        "could leave /llm/NAME/; send the provider's path with plain segments, as its API "
        "spells them (such as /llm/anthropic/v1/messages)"
    )


def _shown(value: str | None) -> str:
    if value is None:
        return "(none)"
    return repr(value if len(value) <= _SHOWN else value[: _SHOWN - 3] + "...")
