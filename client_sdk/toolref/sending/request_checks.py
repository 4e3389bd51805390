"""Checks of what `ToolReferenceManager` is given: its options, and each body and method.

Each raises where the mistake is made (the constructor, or the call), with a message that
names the value and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from toolref.kit.option_checks import check_seconds
from toolref.registry.packages import PACKAGES
from toolref.wire.errors import ValidationError


def check_body(body: object, key: str) -> None:
    """A request body for `ToolReferenceManager.post`: a mapping holding a list at `key`."""
    if not isinstance(body, Mapping):
        raise ValidationError(
            f"json is the request body, a mapping holding the messages under {key!r}, not a "
            f"{type(body).__name__}: post(client, url, json={{{key!r}: messages}})"
        )
    if key not in body:
        lists = [str(k) for k, v in body.items() if isinstance(v, list)]
        hint = (
            f", or make the manager with messages_key={lists[0]!r}"
            if len(lists) == 1
            else " (or set the manager's messages_key)"
        )
        raise ValidationError(
            f"the request body has no {key!r} key (its keys: "
            f"{', '.join(map(repr, body)) or 'none'}); put the messages under {key!r}{hint}"
        )
    messages = body[key]
    if not isinstance(messages, list):
        raise ValidationError(
            f"the request body's {key!r} is a {type(messages).__name__}, not a list of messages; "
            f"send the conversation as a list under {key!r}"
        )


def check_stream_method(method: object) -> None:
    """`ToolReferenceManager.stream`'s method: the messages travel in a POST body."""
    if not isinstance(method, str) or method.upper() != "POST":
        raise ValueError(
            f"stream() sends the messages in the body of a POST, so method must be 'POST', not "
            f"{method!r}; for a request without messages use the client itself: "
            f"client.stream({method!r}, url)"
        )


def check_shape_problems(value: object) -> bool:
    """`Transport(shape_problems=...)`: a bool (a string such as "no" would read as true)."""
    if not isinstance(value, bool):
        raise TypeError(
            f"shape_problems must be True or False, not {value!r}: True hands toolref's "
            "problems to the SDK in its API's error shape, False as problem+json"
        )
    return value


def check_channel_retry_max(value: object) -> float:
    """`AsyncTransport(channel_retry_max=...)`: seconds above 0, finite (the channel's
    back-off cap: `toolref.sending.backoff`)."""
    return check_seconds(
        "channel_retry_max",
        value,
        600,
        "the most a sender waits, sending edits over HTTP, before trying a receiver's channel "
        "again after failures in a row to have it",
    )


def check_inner(inner: object, *, sync: bool) -> None:
    """`Transport(inner)` / `AsyncTransport(inner)`: a transport of the same kind (sync or
    async), not a client, not the other kind (each is called at the first request only, so a
    wrong one would go unseen until then)."""
    made, other = ("Transport", "AsyncTransport") if sync else ("AsyncTransport", "Transport")
    default = "httpx.HTTPTransport()" if sync else "httpx.AsyncHTTPTransport()"
    needed, wrong = (
        ("handle_request", "handle_async_request")
        if sync
        else ("handle_async_request", "handle_request")
    )
    from toolref.sending.transport import AsyncTransport, Transport  # it imports this module

    name = type(inner).__name__
    if isinstance(inner, (Transport, AsyncTransport)):
        raise TypeError(
            f"inner is a toolref {name} already: one around it would offer edits to itself and "
            f"handle each request twice; give the client one {made}, wrapping the transport "
            f"that sends: {made}(inner={default}), or {made}() for a new one"
        )
    if inner is None or callable(getattr(inner, needed, None)):
        return
    if callable(getattr(inner, "send", None)) and callable(getattr(inner, "build_request", None)):
        raise TypeError(
            f"inner is a client ({name}), not a transport: give {made}() the client's "
            f"transport, inner={default} (or leave inner out), and the client {made}(): "
            f"httpx.{'Client' if sync else 'AsyncClient'}(transport={made}())"
        )
    if callable(getattr(inner, wrong, None)):
        kind = "an async" if sync else "a sync"
        raise TypeError(
            f"inner is {kind} transport ({name}), and {made} sends for "
            f"{'sync' if sync else 'async'} clients only: pass inner={default} (or leave "
            f"inner out), or use {other} with {'an async' if sync else 'a sync'} client"
        )
    raise TypeError(
        f"inner must be an httpx transport ({default}, or None for a new one), not {inner!r}"
    )


def check_manager(manager: object, made: str) -> None:
    """`Transport(manager=...)`: a `ToolReferenceManager` (or None for a new one)."""
    from toolref.sending.manager import ToolReferenceManager  # it imports this module

    if manager is not None and not isinstance(manager, ToolReferenceManager):
        raise TypeError(
            f"manager must be a ToolReferenceManager (or None for a new one), not {manager!r}: "
            f"{made}(manager=ToolReferenceManager(...))"
        )


CLIENTS: Final = ("Client", "AsyncClient")
_KINDS: dict[type, bool | None] = {}  # client class -> async (read once per class)


def _async_client(kind: type) -> bool | None:
    """True for an async httpx (or httpx2) client class, False for a sync one, None for
    neither (read once per class)."""
    if kind in _KINDS:
        return _KINDS[kind]
    found = next(
        (
            base.__name__ == "AsyncClient"
            for base in kind.__mro__
            if base.__module__.split(".")[0] in PACKAGES and base.__name__ in CLIENTS
        ),
        None,
    )
    _KINDS[kind] = found
    return found


def check_client(client: object, *, sync: bool) -> None:
    """`post`/`stream` take a sync httpx client, `apost`/`astream` an async one: the other kind
    would fail deep inside (a coroutine never awaited, or a blocking call on the loop)."""
    is_async = _async_client(type(client))
    if is_async is (not sync):
        return
    call = (
        "manager.post(http, url, json=body)"
        if sync
        else "await manager.apost(http, url, json=body)"
    )
    if is_async is None:
        raise TypeError(
            f"client is the httpx.{'Client' if sync else 'AsyncClient'} to send through, not "
            f"{client!r}: {call}"
        )
    name = type(client).__name__
    if sync:
        raise TypeError(
            f"client is an async client ({name}), and post()/stream() send through a sync one: "
            "use `await manager.apost(client, ...)` or `async with manager.astream(client, "
            "...)`, or pass an httpx.Client"
        )
    raise TypeError(
        f"client is a sync client ({name}), and apost()/astream() send through an async one: "
        "use manager.post(client, ...) or manager.stream(client, ...), or pass an "
        "httpx.AsyncClient"
    )
