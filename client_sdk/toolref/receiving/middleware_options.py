"""Checks of what `ToolRefMiddleware` is given, when the app is built, not per request:
its registry, messages keys, format, paths and limits, each with the fix in its message."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping

from toolref import formats
from toolref.asgi.budget import Budget
from toolref.kit.option_checks import check_count, check_key, check_seconds
from toolref.registry.client import RegistryClient
from toolref.wire.endpoints import CHANNEL_PATH


def check_app(app: object) -> None:
    """The app `ToolRefMiddleware` wraps: an ASGI app instance, `await app(scope, receive,
    send)`; anything else would fail at every request, deep inside the server."""
    fix = "ToolRefMiddleware(app, registry=...) or app.add_middleware(ToolRefMiddleware, ...)"
    if isinstance(app, type):
        raise TypeError(
            f"app is the class {app.__name__}, not an ASGI app: pass an instance, "
            f"{app.__name__}(...), to {fix}"
        )
    if not callable(app):
        raise TypeError(
            f"app must be an ASGI app (async, called as app(scope, receive, send)), not "
            f"{app!r}: {fix}"
        )
    if inspect.isfunction(app) and not inspect.iscoroutinefunction(app):
        params = inspect.signature(app).parameters.values()
        if sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) == 2:
            raise TypeError(
                f"app {app.__qualname__} takes two arguments, as a WSGI app (environ, "
                "start_response) does, but ToolRefMiddleware is ASGI middleware: serve an ASGI "
                "app (Starlette, FastAPI) or wrap it with a WSGI-to-ASGI adapter "
                "(a2wsgi.WSGIMiddleware(app))"
            )


def check_middleware_options(
    *,
    registry: object,
    messages_keys: object,
    format: object,
    paths: object,
    max_body_bytes: object,
    held_bytes: object = 0,
    channel_path: object = None,
    channel_idle_seconds: object = 300.0,
    max_inflated_bytes: object = 1,
    alter_answers: object = True,
    offload_bytes: object = None,
    budget: object = None,
) -> None:
    """`ToolRefMiddleware`'s options, checked when the app is built, not per request."""
    if isinstance(registry, RegistryClient):
        raise TypeError(
            "ToolRefMiddleware awaits the registry, so it needs an AsyncRegistryClient, not a "
            "RegistryClient: registry=AsyncRegistryClient(url, api_key=...)"
        )
    if not callable(getattr(registry, "hydrate", None)):
        raise TypeError(
            f"registry is an AsyncRegistryClient, not a {type(registry).__name__}: "
            "registry=AsyncRegistryClient(url, api_key=...)"
        )
    if isinstance(messages_keys, str):
        raise TypeError(
            f"messages_keys is the str {messages_keys!r}, which would be read as one key per "
            f"character; pass a sequence: messages_keys=({messages_keys!r},)"
        )
    if not isinstance(messages_keys, Collection):
        raise TypeError(f"messages_keys is a sequence of str keys, not {messages_keys!r}")
    keys = tuple(messages_keys)
    if not keys:
        raise ValueError(
            "messages_keys is empty, so no request would be handled; name the key the messages "
            "sit under (default: ('messages', 'input', 'contents'))"
        )
    for key in keys:
        check_key("each of messages_keys", key)
    if format is not None:
        formats.check_format(format)
    if isinstance(paths, str):
        raise TypeError(
            f"paths is the str {paths!r}, which would match every path that is a substring of "
            f"it; pass a collection: paths={{{paths!r}}}"
        )
    if paths is not None and not hasattr(paths, "__contains__"):
        raise TypeError(f"paths is a collection of paths (a set, say) or None, not {paths!r}")
    if paths is not None and not isinstance(paths, Mapping) and isinstance(paths, Iterable):
        bad = [path for path in paths if not isinstance(path, str) or not path.startswith("/")]
        if bad:
            raise ValueError(
                f"paths holds {bad[0]!r}, which no request path matches (each starts with /, "
                f"as scope['path'] does): paths={{'/{str(bad[0]).lstrip('/')}'}}"
            )
    check_count("max_body_bytes", max_body_bytes, 1, "it is the largest body, in bytes")
    check_count(
        "held_bytes",
        held_bytes,
        0,
        "it bounds the requests held as the next edits' bases (0: none)",
    )
    check_count(
        "max_inflated_bytes",
        max_inflated_bytes,
        1,
        "it is the largest body once inflated, in bytes",
    )
    if not isinstance(alter_answers, bool):
        raise TypeError(
            f"alter_answers must be True or False, not {alter_answers!r} (a str such as 'no' "
            "would read as true)"
        )
    if offload_bytes is not None:
        check_count("offload_bytes", offload_bytes, 0, "or None to run every step on the loop")
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(
            f"budget is a toolref.asgi.budget.Budget (or None for the shared one), not "
            f"{budget!r}: for a limit in bytes, budget=Budget(<bytes>)"
        )
    if channel_path is not None and (
        not isinstance(channel_path, str) or CHANNEL_PATH.fullmatch(channel_path) is None
    ):
        raise TypeError(
            f"channel_path is the path of the channel's WebSocket (a str starting with /, of "
            f"URL path characters, at most 256; /v1/channel is where clients look) or None "
            f"for no channel, not {channel_path!r}"
        )
    _check_idle(channel_idle_seconds)


def _check_idle(value: object) -> None:
    """`channel_idle_seconds`: seconds above 0, finite (a channel left silent is closed)."""
    check_seconds(
        "channel_idle_seconds",
        value,
        300,
        "how long a channel with no turn in flight and no frame is kept open (a silent one "
        "would hold its connection for ever)",
    )
