"""Checks of what `ToolReferenceManager` is given: its options, and each body and method.

Each raises where the mistake is made (the constructor, or the call), with a message that
names the value and the fix."""

from __future__ import annotations

from collections.abc import Mapping

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
