"""Settings of summaries: the default summarizer and budget, tool kinds, and the LLM
summarizer's endpoint, bounds, connections, quotas, breaker and computation lock."""

from __future__ import annotations

from functools import cached_property
from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from toolref.kit.kinds import KindTable
from toolref.wire.errors import ConfigurationError

SUMMARIZER_NAMES = ("extractive", "openai-compatible")
# How much longer than TOOLREF_LLM_TIMEOUT a request waits for a summary computation.
JOIN_MARGIN_SECONDS = 1.0


class SummarySettings(BaseModel):
    """Which summarizer, how long a summary; the LLM: where, which model, and its bounds."""

    summarizer: str = Field(
        default="extractive",
        description="Summarizer used when a request names none: extractive or openai-compatible.",
    )
    summary_max_chars: int = Field(
        default=400, ge=40, le=20_000, description="Summary budget when a request names none."
    )
    tool_kinds: str = Field(
        default="", description="Tool kind overrides, `name=kind,...` (see toolref.kit.kinds)."
    )
    llm_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API base URL; set it to offer the openai-compatible "
        "summarizer.",
    )
    llm_model: str = Field(default="gpt-4o-mini", description="Model the LLM summarizer asks.")
    llm_api_key: SecretStr | None = Field(default=None, description="API key for the LLM.")
    llm_prompt_version: str = Field(
        default="v1", description="Summary prompt version (part of the summarizer id)."
    )
    llm_timeout: float = Field(
        default=8.0,
        gt=0,
        description="Total time one LLM call may take (connect, send, the whole answer), in "
        "seconds; past it, extractive. Requests joined to a computation wait at most this "
        "plus 1 s.",
    )
    llm_input_chars: int = Field(
        default=24_000, ge=1000, description="Most characters of a result sent to the LLM."
    )
    llm_max_answer_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Most bytes of an LLM answer read; a larger one is cut off unread and "
        "the extractive summary used.",
    )
    llm_calls_per_request: int = Field(
        default=16,
        ge=1,
        description="Most LLM summaries one request computes or waits for; the rest of its "
        "results get the extractive summary.",
    )
    llm_calls_per_tenant_minute: int = Field(
        default=300,
        ge=1,
        description="Most LLM calls one tenant's requests start per minute (all replicas, "
        "counted in Redis); past it, extractive.",
    )
    llm_tenant_calls_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="LLM calls one tenant's requests have under way at once, per worker "
        "(where TOOLREF_API_KEYS names two tenants or more); past it, that tenant's further "
        "summaries are extractive at once while the others are served. Unset: a quarter of "
        "TOOLREF_LLM_MAX_CONNECTIONS, at least 1.",
    )
    llm_max_connections: int = Field(
        default=100,
        ge=1,
        description="Connections to the LLM per worker, shared by every tenant: at most this "
        "many LLM calls at once; the others wait for one, at most TOOLREF_LLM_POOL_WAIT.",
    )
    llm_pool_wait: float | None = Field(
        default=None,
        gt=0,
        description="Seconds an LLM call may wait for a free connection, within "
        "TOOLREF_LLM_TIMEOUT; past it, extractive, and not counted as an LLM failure (the "
        "LLM was not asked). Must be below TOOLREF_LLM_TIMEOUT. Unset: a quarter of it.",
    )
    llm_breaker_failures: int = Field(
        default=5,
        ge=1,
        description="LLM failures in a row (per process) after which the LLM is not called "
        "for the cool-down; then one call probes.",
    )
    llm_breaker_seconds: float = Field(
        default=30.0, gt=0, description="Cool-down of the LLM circuit breaker, in seconds."
    )
    llm_failure_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How long a failed LLM summary (or handoff dialogue summary) is "
        "remembered: meanwhile it is not asked again, the extractive one is used at once.",
    )
    summary_lock_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Expiry of a summary computation lock (a crashed "
        "holder blocks others at most this long). Must exceed the LLM timeout plus 1 s.",
    )

    @field_validator("tool_kinds")
    @classmethod
    def _check_kinds(cls, value: str) -> str:
        KindTable.parse(value)
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _check_llm_base_url(cls, value: str | None) -> str | None:
        # `api.openai.com/v1` was taken, and every summary fell back to extractive
        if value is not None:
            try:
                parts = urlsplit(value)
                _ = parts.port  # ValueError when it is not one
            except ValueError:
                parts = None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    "not an http(s) URL with a host; give the API's base URL, such as "
                    "https://api.openai.com/v1 (its /chat/completions is called)"
                )
        return value

    @field_validator("summarizer")
    @classmethod
    def _check_summarizer(cls, value: str) -> str:
        if value not in SUMMARIZER_NAMES:
            raise ValueError(f"use one of {', '.join(SUMMARIZER_NAMES)}")
        return value

    @model_validator(mode="after")
    def _check_lock(self) -> Self:
        # The holder keeps the lock from its SET NX through a quota round trip, the
        # computation (cut off at `summary_compute_seconds`) and the round trips that keep
        # its value: the lock must outlast all of them, so the whole join margin.
        bound = self.llm_timeout + JOIN_MARGIN_SECONDS
        if self.summary_lock_seconds <= bound:
            raise ValueError(
                f"TOOLREF_SUMMARY_LOCK_SECONDS ({self.summary_lock_seconds}) must exceed "
                f"TOOLREF_LLM_TIMEOUT ({self.llm_timeout}) + {JOIN_MARGIN_SECONDS} s: a "
                f"computation is cut off {JOIN_MARGIN_SECONDS / 2} s after the timeout and "
                "its value kept a round trip later, and a lock that expires while its holder "
                "still waits for the LLM lets a second request call it too; raise "
                f"TOOLREF_SUMMARY_LOCK_SECONDS above {bound} or lower TOOLREF_LLM_TIMEOUT "
                f"below {self.summary_lock_seconds - JOIN_MARGIN_SECONDS}"
            )
        return self

    @model_validator(mode="after")
    def _check_pool_wait(self) -> Self:
        # A wait as long as the whole call would leave the LLM no time once connected.
        if self.llm_pool_wait is not None and self.llm_pool_wait >= self.llm_timeout:
            raise ValueError(
                f"TOOLREF_LLM_POOL_WAIT ({self.llm_pool_wait}) is not below TOOLREF_LLM_TIMEOUT "
                f"({self.llm_timeout}): the wait for a connection is part of the call's time, "
                "so the LLM would have none left; lower it (unset: a quarter of the timeout)"
            )
        return self

    @property
    def llm_pool_wait_seconds(self) -> float:
        """TOOLREF_LLM_POOL_WAIT, or a quarter of TOOLREF_LLM_TIMEOUT: a call the LLM is
        blamed for (a timeout) had at least the rest of the timeout once connected."""
        return self.llm_pool_wait if self.llm_pool_wait is not None else self.llm_timeout / 4

    @property
    def llm_tenant_calls_share(self) -> int:
        """TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT, or a quarter of the LLM connections."""
        if self.llm_tenant_calls_in_flight is not None:
            return self.llm_tenant_calls_in_flight
        return max(self.llm_max_connections // 4, 1)

    @cached_property
    def kinds(self) -> KindTable:
        return KindTable.parse(self.tool_kinds)

    def check_summarizer(self) -> None:
        if self.summarizer == "openai-compatible" and not self.llm_base_url:
            raise ConfigurationError(
                "TOOLREF_SUMMARIZER is openai-compatible but TOOLREF_LLM_BASE_URL is not set; "
                "set it (and TOOLREF_LLM_MODEL, TOOLREF_LLM_API_KEY), or use extractive"
            )

    @property
    def summary_wait_seconds(self) -> float:
        """Longest a request waits for a summary computation it started or joined (the
        LLM's total timeout, plus a margin for Redis round trips and parsing; never past
        the lock's expiry)."""
        return min(self.llm_timeout + JOIN_MARGIN_SECONDS, self.summary_lock_seconds)

    @property
    def summary_compute_seconds(self) -> float:
        """When the summary cache cuts a computation off, whatever the summarizer does (the
        LLM's own deadline comes first; waiting requests give up just after)."""
        return self.llm_timeout + JOIN_MARGIN_SECONDS / 2

    @property
    def summarizer_names(self) -> list[str]:
        return list(SUMMARIZER_NAMES if self.llm_base_url else SUMMARIZER_NAMES[:1])
