"""An agent's LLM request as the relay's switch reads it: its API's format, where its
messages sit, its body parsed. Pure. Only switching upstreams needs the body parsed (to
carry the conversation's tool context over): an edit cuts the agent's own bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolref.wire.encoding import JSON_TYPE, media_type
from toolref.wire.endpoints import endpoint
from toolref.wire.models import FormatName


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """An LLM request the relay reads: its API's format, where its messages sit, its body."""

    format: FormatName
    messages_key: str
    body: dict[str, Any]


def recognise(
    method: str, path: str, headers: Mapping[str, str], content: bytes
) -> LLMRequest | None:
    """The LLM request `content` is, or None when it is not one to read (not an LLM
    endpoint, not plain JSON, no list of messages)."""
    found = endpoint(method, path)
    if found is None or not _plain_json(headers):
        return None
    try:
        body = json.loads(content, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError):  # not JSON, an integer past the digit limit, or
        return None  # nested past the parser: passed on as it came
    if not isinstance(body, dict) or not isinstance(body.get(found.messages_key), list):
        return None
    return LLMRequest(found.format, found.messages_key, body)


def _plain_json(headers: Mapping[str, str]) -> bool:
    named = {k.lower(): v for k, v in headers.items()}
    if named.get("content-encoding", "identity").strip().lower() != "identity":
        return False
    return media_type(named.get("content-type")) == JSON_TYPE


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit a double")
    return value


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")
