"""Which headers travel where: the agent's to the gateway (or the fallback), the answer's
back to the agent. Pure functions over (name, value) pairs, names in any case."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

KEY_HEADER: Final = "Toolref-Key"
SWITCH_HEADER: Final = "Toolref-Switch"
SWITCHED_FROM_HEADER: Final = "Toolref-Switched-From"
SAVINGS_HEADER: Final = "Toolref-Savings"

# One connection's business (RFC 9110 7.6.1), never another's; `host` is the next hop's.
HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)
# Set again for the body the relay sends, when it sends another than the agent's.
_BODY: Final = frozenset({"content-length", "content-encoding"})
_TOOLREF: Final = "toolref-"

Pairs = Sequence[tuple[str, str]]


def decoded(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """ASGI header pairs as text (HTTP header bytes are latin-1)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


def encoded(pairs: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


def first(pairs: Pairs, name: str) -> str | None:
    """The first value of header `name`, or None."""
    wanted = name.lower()
    return next((v for k, v in pairs if k.lower() == wanted), None)


def end_to_end(pairs: Pairs) -> list[tuple[str, str]]:
    """`pairs` without hop-by-hop headers: the fixed ones, `proxy-*`, and any the
    `Connection` header names."""
    named = {
        token.strip().lower()
        for k, v in pairs
        if k.lower() == "connection"
        for token in v.split(",")
    }
    return [
        (k, v)
        for k, v in pairs
        if (low := k.lower()) not in HOP_BY_HOP
        and not low.startswith("proxy-")
        and low not in named
    ]


def to_gateway(
    pairs: Pairs, *, key: str | None, switched_from: str | None, body_changed: bool
) -> list[tuple[str, str]]:
    """The agent's headers for the gateway: credentials and the rest as they are; the
    agent's own `Toolref-*` headers dropped (the relay speaks toolref for it); the body's
    length and encoding dropped when the relay sends another body (inflated)."""
    kept = [
        (k, v)
        for k, v in end_to_end(pairs)
        if not k.lower().startswith(_TOOLREF) and not (body_changed and k.lower() in _BODY)
    ]
    if key:
        kept.append((KEY_HEADER, key))
    if switched_from:
        kept.append((SWITCHED_FROM_HEADER, switched_from))
    return kept


def to_provider(pairs: Pairs) -> list[tuple[str, str]]:
    """The agent's headers for the fallback (the provider itself): as the agent sent them,
    minus hop-by-hop; nothing of toolref's."""
    return [(k, v) for k, v in end_to_end(pairs) if not k.lower().startswith(_TOOLREF)]


def to_agent(
    pairs: Pairs, *, body_changed: bool = False, extra: Pairs = ()
) -> list[tuple[bytes, bytes]]:
    """An answer's headers for the agent: minus hop-by-hop and toolref's own (the agent
    does not speak toolref), plus `extra`. `body_changed`: the relay sends the body
    decoded (a problem it had to read), so its length and encoding are the server's to
    set again."""
    kept = [
        (k, v)
        for k, v in end_to_end(pairs)
        if not k.lower().startswith(_TOOLREF) and not (body_changed and k.lower() in _BODY)
    ]
    return encoded([*kept, *extra])
