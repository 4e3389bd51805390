"""Checks of the options `ToolReferenceManager` and `ToolRefMiddleware` are given.

Each raises where the mistake is made (the constructor, or the call), with a message that
names the value and the fix, instead of the mistake surfacing later as a silent no-op, a
`KeyError`, or a 422 answered to every client.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from toolref import formats
from toolref.registry.client import RegistryClient
from toolref.wire.errors import ValidationError


def check_count(name: str, value: object, minimum: int, fix: str = "") -> None:
    """`value` is an int of at least `minimum`; TypeError or ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not a {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}" + (f"; {fix}" if fix else ""))


def check_key(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} is the non-empty str key of the messages, not {value!r}")


def check_manager_options(
    format: object,
    messages_key: object,
    max_refs: object,
    max_histories: object,
    *,
    max_transcripts: object,
    max_transcript_bytes: object,
    max_prior_bytes: object = 0,
) -> None:
    """`ToolReferenceManager`'s options (an unknown format would otherwise be skipped quietly:
    the manager sends messages it cannot read as they are)."""
    if format is not None:
        formats.check_format(format)
    check_key("messages_key", messages_key)
    check_count("max_refs", max_refs, 1, "it is how many confirmed refs the manager remembers")
    check_count(
        "max_histories",
        max_histories,
        1,
        "it is how many confirmed histories the manager remembers (history_refs=False turns "
        "history refs off)",
    )
    check_count(
        "max_transcripts",
        max_transcripts,
        0,
        "it is how many conversations' transcripts the manager keeps (0 keeps none)",
    )
    check_count(
        "max_transcript_bytes",
        max_transcript_bytes,
        0,
        "it is how many bytes the transcripts may hold together",
    )
    check_count(
        "max_prior_bytes",
        max_prior_bytes,
        0,
        "it is how many bytes the bodies kept to compress against may hold together (0 keeps none)",
    )


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


def check_middleware_options(
    *,
    registry: object,
    messages_keys: object,
    format: object,
    paths: object,
    max_body_bytes: object,
    recent_histories: object,
    recent_history_chars: object = 0,
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
    check_count("recent_histories", recent_histories, 0, "0 keeps none in memory")
    check_count(
        "recent_history_chars",
        recent_history_chars,
        0,
        "it bounds the characters of the histories kept in full (0 keeps none)",
    )
