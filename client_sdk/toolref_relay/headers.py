"""Which headers travel where: the agent's to the gateway (or the fallback), the answer's
back to the agent. Pure functions over (name, value) pairs, names in any case; the rules
both proxies share are `toolref.asgi.hops`."""

from __future__ import annotations

from typing import Final

from toolref.asgi.hops import Pairs, decoded, encoded, end_to_end, first, without_toolref
from toolref.wire.headers import (
    CONTEXT_EDITING_HEADER,
    CONTEXT_HEADER,
    KEY_HEADER,
    SAVINGS_HEADER,
    SWITCH_HEADER,
    SWITCHED_FROM_HEADER,
)

# Set again for the body the relay sends, when it sends another than the agent's.
_BODY: Final = frozenset({"content-length", "content-encoding"})

__all__ = [
    "CONTEXT_HEADER",
    "KEY_HEADER",
    "SAVINGS_HEADER",
    "SWITCHED_FROM_HEADER",
    "SWITCH_HEADER",
    "Pairs",
    "decoded",
    "first",
    "to_agent",
    "to_gateway",
    "to_provider",
    "toolref_headers",
]


def to_gateway(
    pairs: Pairs,
    *,
    key: str | None,
    switched_from: str | None,
    body_changed: bool,
    context_editing: bool | None = None,
) -> list[tuple[str, str]]:
    """The agent's headers for the gateway: credentials and the rest as they are; the
    agent's own `Toolref-*` headers dropped (the relay speaks toolref for it); the body's
    length and encoding dropped when the relay sends another body (inflated)."""
    kept = [(k, v) for k, v in without_toolref(end_to_end(pairs)) if not _resized(k, body_changed)]
    return [*kept, *toolref_headers(key, switched_from, context_editing)]


def toolref_headers(
    key: str | None, switched_from: str | None, context_editing: bool | None
) -> list[tuple[str, str]]:
    """The relay's own headers on a request to the gateway: the tenant's key, the switch,
    and whether it asks for context editing (None: the gateway's policy decides)."""
    found = [(KEY_HEADER, key)] if key else []
    if switched_from:
        found.append((SWITCHED_FROM_HEADER, switched_from))
    if context_editing is not None:
        found.append((CONTEXT_EDITING_HEADER, "on" if context_editing else "off"))
    return found


def to_provider(pairs: Pairs) -> list[tuple[str, str]]:
    """The agent's headers for the fallback (the provider itself): as the agent sent them,
    minus hop-by-hop; nothing of toolref's."""
    return without_toolref(end_to_end(pairs))


def to_agent(
    pairs: Pairs, *, body_changed: bool = False, extra: Pairs = ()
) -> list[tuple[bytes, bytes]]:
    """An answer's headers for the agent: minus hop-by-hop and toolref's own (the agent
    does not speak toolref), plus `extra`. `body_changed`: the relay sends the body
    decoded (a problem it had to read), so its length and encoding are the server's to
    set again."""
    kept = [(k, v) for k, v in without_toolref(end_to_end(pairs)) if not _resized(k, body_changed)]
    return encoded([*kept, *extra])


def _resized(name: str, body_changed: bool) -> bool:
    return body_changed and name.lower() in _BODY
