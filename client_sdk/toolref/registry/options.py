"""What a registry client checks before any request: its options when it is made (a
misspelt one is a TypeError, a value that cannot work a ValueError), and the arguments of
each operation (what would be a 422 is refused without a request)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

from toolref import formats
from toolref.wire.canonical import Ref, invocation_members
from toolref.wire.errors import ValidationError
from toolref.wire.models import FormatName, HydrateMode, Invocation

InvocationLike = Invocation | Mapping[str, Any]
WireEncoding = Literal["auto", "json", "msgpack"]
ENCODINGS: Final[tuple[str, ...]] = get_args(WireEncoding)
_MODES: Final[tuple[str, ...]] = get_args(HydrateMode)

# Numeric option -> (the values that work, what it is): a wrong value's error names both.
NUMBERS: Final = {
    "timeout": ("> 0", "seconds per request"),
    "retries": (">= 0", "retries after a failed attempt; 0 for none"),
    "backoff": (">= 0", "seconds before the first retry; 0 for none"),
    "max_backoff": (">= 0", "the longest wait between retries, in seconds"),
    "compress_threshold": (">= 0", "bytes from which request bodies are compressed; 0 for all"),
}


def check_number(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} is a number, not a {type(value).__name__} ({value!r})")
    works, meaning = NUMBERS[name]
    if math.isinf(value):  # a timeout never applied, retries without end
        raise ValueError(f"{name} must be finite, got {value!r}: it is {meaning}")
    if math.isnan(value) or value < 0 or (works == "> 0" and value == 0):
        raise ValueError(f"{name} must be {works}, got {value!r}: it is {meaning}")


def check_encoding(encoding: object) -> None:
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")


def check_base_url(base_url: object) -> str:
    example = "'http://127.0.0.1:8750'"
    if not isinstance(base_url, str):
        raise TypeError(f"base_url is a str such as {example}, not {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https"):
        rest = base_url.split("://", 1)[-1].lstrip("/")
        raise ValueError(
            f"base_url {base_url!r} does not start with http:// or https://; use "
            + (repr(f"http://{rest}") if rest else example)
        )
    if not parts.hostname:
        raise ValueError(
            f"base_url {base_url!r} has no host; use the registry's, such as {example}"
        )
    if parts.query or parts.fragment:
        raise ValueError(
            f"base_url {base_url!r} has a query or fragment; give the registry's root URL only"
        )
    return base_url.rstrip("/")


def check_api_key(api_key: object) -> str | None:
    if api_key is None:
        return None
    if not isinstance(api_key, str):
        raise TypeError(f"api_key is a str or None, not a {type(api_key).__name__}")
    if not api_key:
        raise ValueError("api_key is empty; pass api_key=None to send no key")
    if api_key.lower().startswith("bearer "):
        raise ValueError(
            f"api_key starts with {api_key[:7]!r}; pass the key alone (the client adds 'Bearer ')"
        )
    if any(c.isspace() for c in api_key):
        where = next(i for i, c in enumerate(api_key) if c.isspace())
        raise ValueError(
            f"api_key has whitespace ({api_key[where]!r} at index {where} of {len(api_key)}); "
            "keys have none: strip it (a key read from a file often ends with a newline)"
        )
    return api_key


# --- the arguments of operations ------------------------------------------------------------


def wires(invocations: Iterable[InvocationLike]) -> list[dict[str, Any]]:
    """The wire form of each invocation; a mapping with a wrong key is a `ValidationError`."""
    if isinstance(invocations, (Mapping, str, bytes, Invocation)):
        raise ValidationError(
            f"register takes a list of invocations, not one {type(invocations).__name__}; "
            "wrap it in a list: register([invocation])"
        )
    return [
        i.to_wire() if isinstance(i, Invocation) else invocation_members(i, f"invocation {n}")
        for n, i in enumerate(invocations)
    ]


def unique_refs(refs: Iterable[str]) -> list[str]:
    """Validated refs, each once: the server dedupes within a batch, this across batches."""
    if isinstance(refs, (str, bytes)):
        raise ValidationError(
            f"refs is one string ({refs!r}), not a list of refs; wrap it in a list: [ref]"
        )
    return list(dict.fromkeys(str(Ref(r)) for r in refs))


def check_messages_options(
    messages: Any, format: FormatName | None, mode: HydrateMode | None = None
) -> None:
    """optimize and hydrate arguments, checked before any request (they would be a 422)."""
    formats.check_messages(messages)
    if format is not None:
        formats.check_format(format)
    if mode is not None and mode not in _MODES:
        raise ValidationError(
            f"unknown mode {mode!r}; use one of {', '.join(_MODES)} (None means full)",
            modes=list(_MODES),
        )
