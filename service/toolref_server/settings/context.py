"""Settings of context editing at the gateway (`toolref_server.context`): its policy
(`Policy`), one default from the `TOOLREF_CONTEXT_*` settings, then per upstream and per
tenant (`TOOLREF_CONTEXT_POLICIES`); a request's own `Toolref-Context-Editing` header
decides within it (`toolref_server.context.policy.wanted`). Pure: parsing and merging only.

`TOOLREF_CONTEXT_POLICIES` is a JSON object (in the config file, `[context.context_policies]`
tables) of `upstreams` and `tenants`, each name to the fields it sets::

    {"upstreams": {"anthropic": {"trigger_tokens": 50000}},
     "tenants": {"acme": {"mode": "never"}}}

A tenant's fields win over its upstream's, which win over the defaults.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any, Final

from pydantic import BaseModel, Field, field_validator

from toolref.wire.errors import ConfigurationError
from toolref_server.settings.summaries import SUMMARIZER_NAMES

# off: only a request that asks (`Toolref-Context-Editing: on`); on: every request but one that
# refuses (`off`); never: no request, whatever it asks.
MODES: Final = ("off", "on", "never")
_SCOPES: Final = ("upstreams", "tenants")


@dataclass(frozen=True, slots=True)
class Policy:
    """When and what context editing replaces (docs/context-editing.md: each default, why).

    - `trigger_tokens`: a request is edited once the conversation's estimated input passes
      this (tokens: its messages' bytes / 4), counted after what earlier batches cleared;
    - `keep`: the last `keep` tool results are never replaced;
    - `min_tokens`: a result shorter than this is never replaced;
    - `clear_at_least`: a batch frees at least this many tokens, or none is made: the
      provider's prompt cache is rewritten once per batch, not once per turn;
    - `exclude_tools`: tools whose results are never replaced;
    - `summarizer`, `summary_chars`: what stands in for a result (the service's summarizers);
    - `respect_client`: a request whose own `context_management` clears tool uses or
      compacts (`clear_tool_uses_*`, `compact_*`) is left to it;
    - `price_per_mtok`: the input price the saved tokens are counted at, per million;
    - `rewrite_weight`: what writing a token to the provider's prompt cache costs beyond
      reading it, over what reading it costs ((1.25 - 0.1) / 0.1 = 11.5 at Anthropic's
      prices; OpenAI's and Gemini's, which charge no write premium, about 1 to 3; 0: every
      batch is made): a batch is made only when it pays for itself
      (`toolref_server.context.batches`);
    - `max_messages`: a request of more messages passes as it came, unread (what its facts
      hold in memory is a few hundred bytes a message)."""

    mode: str = "off"
    trigger_tokens: int = 10_000
    keep: int = 5
    min_tokens: int = 64
    clear_at_least: int = 2_000
    exclude_tools: frozenset[str] = frozenset()
    summarizer: str = "extractive"
    summary_chars: int = 200
    respect_client: bool = True
    price_per_mtok: float = 3.0
    rewrite_weight: float = 11.5
    max_messages: int = 20_000


_TYPES: Final[dict[str, type]] = {
    "mode": str,
    "trigger_tokens": int,
    "keep": int,
    "min_tokens": int,
    "clear_at_least": int,
    "exclude_tools": frozenset,
    "summarizer": str,
    "summary_chars": int,
    "respect_client": bool,
    "price_per_mtok": float,
    "rewrite_weight": float,
    "max_messages": int,
}
assert set(_TYPES) == {f.name for f in fields(Policy)}


@dataclass(frozen=True, slots=True)
class Policies:
    """The default policy and the overrides by upstream and by tenant."""

    default: Policy
    upstreams: Mapping[str, Mapping[str, Any]]
    tenants: Mapping[str, Mapping[str, Any]]

    def of(self, upstream: str, tenant: str) -> Policy:
        """The policy of `tenant`'s requests to `upstream`. O(fields)."""
        policy = self.default
        for found in (self.upstreams.get(upstream), self.tenants.get(tenant)):
            if found:
                policy = replace(policy, **found)
        return policy


def parse_policies(text: str, default: Policy) -> Policies:
    """`TOOLREF_CONTEXT_POLICIES` (see the module docstring) over `default`;
    `ConfigurationError` saying which name and field is wrong, and how to fix it."""
    if not text.strip():
        return Policies(default, {}, {})
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(
            f"TOOLREF_CONTEXT_POLICIES is not JSON ({exc}); give an object such as "
            '{"upstreams": {"anthropic": {"trigger_tokens": 50000}}}'
        ) from None
    if not isinstance(document, dict) or set(document) - set(_SCOPES):
        raise ConfigurationError(
            "TOOLREF_CONTEXT_POLICIES is an object of `upstreams` and `tenants`, each a name "
            "to the policy fields it sets; it has "
            + (", ".join(map(repr, document)) if isinstance(document, dict) else "no object")
        )
    scopes = []
    for scope in _SCOPES:
        given = document.get(scope, {})
        if not isinstance(given, dict):
            raise ConfigurationError(
                f"TOOLREF_CONTEXT_POLICIES {scope} is a {type(given).__name__}; give an object "
                "of names to policy fields"
            )
        scopes.append({name: _fields(f"{scope}.{name}", body) for name, body in given.items()})
    return Policies(default, scopes[0], scopes[1])


def _fields(where: str, body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ConfigurationError(
            f"TOOLREF_CONTEXT_POLICIES {where} is a {type(body).__name__}; give an object of "
            f"policy fields ({', '.join(_TYPES)})"
        )
    return {
        key: checked(f"TOOLREF_CONTEXT_POLICIES {where}.{key}", key, v) for key, v in body.items()
    }


def checked(where: str, key: str, value: object) -> Any:
    """A policy field's value, checked (`ConfigurationError` naming `where` otherwise)."""
    kind = _TYPES.get(key)
    if kind is None:
        raise ConfigurationError(
            f"{where}: no policy field is named {key!r}; use one of {', '.join(_TYPES)}"
        )
    if kind is frozenset:
        if isinstance(value, str):
            value = [v for v in (p.strip() for p in value.split(",")) if v]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigurationError(f"{where}: give a list of tool names, not {value!r}")
        return frozenset(value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigurationError(f"{where}: give a {kind.__name__}, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # JSON's NaN, Infinity
        raise ConfigurationError(
            f"{where}: give a finite number, not {value!r} (with NaN or infinity whether "
            "a batch pays is decided by nothing, and the cost saved on /metrics reads NaN "
            "or infinity for good)"
        )
    if key == "summarizer" and value not in SUMMARIZER_NAMES:
        raise ConfigurationError(
            f"{where}: give one of {', '.join(SUMMARIZER_NAMES)}, not {value!r}"
        )
    if key == "mode" and value not in MODES:
        raise ConfigurationError(f"{where}: give one of {', '.join(MODES)}, not {value!r}")
    least, most = _BOUNDS.get(key, (0, None))
    if isinstance(value, int | float) and (value < least or (most is not None and value > most)):
        within = f"from {least} to {most}" if most is not None else f"of at least {least}"
        raise ConfigurationError(f"{where}: give a number {within}, not {value!r}")
    return value


# A policy's numbers beyond at least 0, as the environment's own settings bound them (a
# summary of fewer characters than a stand-in's head, or no message read, fails a request;
# a batch that frees nothing rewrites the provider's prompt cache for nothing).
_BOUNDS: Final[dict[str, tuple[int, int | None]]] = {
    "summary_chars": (40, 20_000),
    "max_messages": (1, None),
    "clear_at_least": (1, None),
}


class ContextSettings(BaseModel):
    """`TOOLREF_CONTEXT_EDITING` and the default policy (docs/context-editing.md)."""

    context_editing: str = Field(
        default="off",
        description="Context editing at the gateway: off (only requests that ask, with "
        "`Toolref-Context-Editing: on`), on (every request but those that refuse), never.",
    )
    context_trigger_tokens: int = Field(
        default=10_000,
        ge=0,
        description="Estimated tokens of a conversation's messages (bytes / 4) past which "
        "old tool results are replaced by their summaries.",
    )
    context_keep: int = Field(default=5, ge=0, description="The last tool results never replaced.")
    context_min_tokens: int = Field(
        default=64, ge=0, description="Estimated tokens a result has at least to be replaced."
    )
    context_clear_at_least: int = Field(
        default=2_000,
        ge=1,
        description="Estimated tokens one batch of replacements frees at least (else none "
        "is made): the provider's prompt cache is rewritten once per batch.",
    )
    context_exclude_tools: str = Field(
        default="", description="Tools whose results are never replaced, comma-separated."
    )
    context_summarizer: str = Field(
        default="extractive",
        description="The summarizer whose summary stands in for a result (extractive or "
        "openai-compatible).",
    )
    context_summary_chars: int = Field(
        default=200, ge=40, le=20_000, description="Characters of a result's summary, at most."
    )
    context_respect_client: bool = Field(
        default=True,
        description="Leave a request whose own `context_management` clears tool uses or "
        "compacts (`clear_tool_uses_*`, `compact_*`) to it.",
    )
    context_price_per_mtok: float = Field(
        default=3.0,
        ge=0,
        description="Input price per million tokens that saved tokens are counted at (USD).",
    )
    context_rewrite_weight: float = Field(
        default=11.5,
        ge=0,
        description="Cost of writing a token to the provider's prompt cache beyond reading "
        "it, over reading it (11.5 at Anthropic's prices); a batch is made only when it pays "
        "for itself; 0: always.",
    )
    context_max_messages: int = Field(
        default=20_000,
        ge=1,
        description="Messages a request holds at most to be edited; one of more passes as it "
        "came (its facts would hold a few hundred bytes a message).",
    )
    context_policies: str = Field(
        default="",
        description='Policies by upstream and tenant, JSON: {"upstreams": {name: {field: '
        'value}}, "tenants": {...}} (fields: the policy\'s, without `context_`).',
    )

    @field_validator("context_editing")
    @classmethod
    def _check_context_mode(cls, value: str) -> str:
        if value not in MODES:
            raise ValueError(f"use one of {', '.join(MODES)}")
        return value

    @field_validator("context_policies")
    @classmethod
    def _check_context_policies(cls, value: str) -> str:
        try:
            parse_policies(value, Policy())
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("context_summarizer")
    @classmethod
    def _check_context_summarizer(cls, value: str) -> str:
        if value not in SUMMARIZER_NAMES:
            raise ValueError(f"use one of {', '.join(SUMMARIZER_NAMES)}")
        return value

    @cached_property
    def context_policy(self) -> Policies:
        """The default policy and the overrides (`ConfigurationError` when they are wrong)."""
        default = Policy(
            mode=self.context_editing,
            trigger_tokens=self.context_trigger_tokens,
            keep=self.context_keep,
            min_tokens=self.context_min_tokens,
            clear_at_least=self.context_clear_at_least,
            exclude_tools=frozenset(
                t for t in (p.strip() for p in self.context_exclude_tools.split(",")) if t
            ),
            summarizer=self.context_summarizer,
            summary_chars=self.context_summary_chars,
            respect_client=self.context_respect_client,
            price_per_mtok=self.context_price_per_mtok,
            rewrite_weight=self.context_rewrite_weight,
            max_messages=self.context_max_messages,
        )
        return parse_policies(self.context_policies, default)
