"""Checks of what `ToolRefMiddleware` is given, when the app is built, not per request:
its registry, messages keys, format, paths and limits, each with the fix in its message."""

from __future__ import annotations

from collections.abc import Collection

from toolref import formats
from toolref.kit.option_checks import check_count, check_key
from toolref.registry.client import RegistryClient
from toolref.wire.endpoints import CHANNEL_PATH


def check_middleware_options(
    *,
    registry: object,
    messages_keys: object,
    format: object,
    paths: object,
    max_body_bytes: object,
    held_bytes: object = 0,
    channel_path: object = None,
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
    check_count("max_body_bytes", max_body_bytes, 1, "it is the largest body, in bytes")
    check_count(
        "held_bytes",
        held_bytes,
        0,
        "it bounds the requests held as the next edits' bases (0: none)",
    )
    if channel_path is not None and (
        not isinstance(channel_path, str) or CHANNEL_PATH.fullmatch(channel_path) is None
    ):
        raise TypeError(
            f"channel_path is the path of the channel's WebSocket (a str starting with /, of "
            f"URL path characters, at most 256; /v1/channel is where clients look) or None "
            f"for no channel, not {channel_path!r}"
        )
