"""Headers across a proxy hop (the relay's and the gateway's): toolref's own header names,
which headers are one connection's business, and the `Toolref-Savings` value. Pure
functions over (name, value) pairs, names in any case."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from toolref.wire.headers import TOOLREF_PREFIX

# One connection's business (RFC 9110 7.6.1), never another's; `host` is the next hop's.
HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)

Pairs = Sequence[tuple[str, str]]


def decoded(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """ASGI header pairs as text (HTTP header bytes are latin-1)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


def encoded(pairs: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


def on_the_wire(pairs: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """`decoded` pairs back to their bytes, names as they were, for an `httpx.Request`: a
    value in UTF-8 (`x-title: café`) goes on as it came (httpx encodes `str` values as
    ASCII, and refused it)."""
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in pairs]


def first(pairs: Pairs, name: str) -> str | None:
    """The first value of header `name`, or None."""
    wanted = name.lower()
    return next((v for k, v in pairs if k.lower() == wanted), None)


def end_to_end(pairs: Pairs) -> list[tuple[str, str]]:
    """`pairs` without hop-by-hop headers: the fixed ones, `proxy-*`, and any the
    `Connection` header names; and without `Content-Length` beside a `Transfer-Encoding`
    (the message was framed by its chunks, RFC 9112 6.3: a proxy removes the length, which
    the next hop's HTTP client would otherwise send with a body of another size)."""
    named = {
        token.strip().lower()
        for k, v in pairs
        if k.lower() == "connection"
        for token in v.split(",")
    }
    if any(k.lower() == "transfer-encoding" for k, _ in pairs):
        named.add("content-length")
    return [
        (k, v)
        for k, v in pairs
        if (low := k.lower()) not in HOP_BY_HOP
        and not low.startswith("proxy-")
        and low not in named
    ]


def without_toolref(pairs: Pairs) -> list[tuple[str, str]]:
    """`pairs` without toolref's own headers (for a hop that does not speak toolref)."""
    return [(k, v) for k, v in pairs if not k.lower().startswith(TOOLREF_PREFIX)]


def savings_value(raw: int, wire: int, tokens_saved: int | None = None) -> str:
    """The `Toolref-Savings` value: raw=<bytes>, wire=<bytes>, ratio=<raw/wire>, and
    tokens-saved=<estimated input tokens> where context editing ran."""
    ratio = raw / wire if wire else 1.0
    value = f"raw={raw}, wire={wire}, ratio={ratio:.1f}"
    return value if tokens_saved is None else f"{value}, tokens-saved={tokens_saved}"
