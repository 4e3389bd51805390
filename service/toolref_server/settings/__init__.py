"""Service settings, read once from `TOOLREF_*` environment variables: one `Settings`
object whose fields are declared by concern, one module (and base class) each.

- `serving`: the process: bind address, workers, CPU work threads, log level, Retry-After,
  stopping;
- `connections`: the HTTP layer: a connection's deadlines, connections and requests per
  worker;
- `bodies`: what one request body may be, and the bodies a worker holds at once;
- `access`: tenants' API keys, the /metrics key, per-tenant quotas;
- `store`: the Redis/Valkey engine: URL, timeouts, pool, breaker;
- `records`: lifetimes and compression of what is stored;
- `caches`: the per-process caches of verified records and edited requests;
- `summaries`: the summarizers and the LLM one's bounds;
- `gateway`: upstreams and the gateway's limits;
- `context`: context editing at the gateway, its default policy and the policies by
  upstream and tenant;
- `environment`: the `TOOLREF_*` variables known, and the check refusing any other;
- `config_file`: `serve --config toolref.toml`, a table per group, read into the variables
  it stands for where the environment has none.

Each field's environment variable is `TOOLREF_` + its name in capitals, whichever group
declares it; docs/api.md lists them all with their defaults.
"""

from __future__ import annotations

import os
from typing import Self

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from toolref.kit.option_checks import nearest
from toolref.wire.errors import ConfigurationError
from toolref_server.settings.access import (
    LOCAL_TENANT,
    TENANT_RE,
    AccessSettings,
    parse_api_keys,
)
from toolref_server.settings.bodies import BodyLimits
from toolref_server.settings.caches import CacheSettings
from toolref_server.settings.connections import ConnectionSettings
from toolref_server.settings.context import ContextSettings
from toolref_server.settings.environment import PREFIX, check_variables
from toolref_server.settings.gateway import GatewaySettings
from toolref_server.settings.records import RecordSettings
from toolref_server.settings.serving import ServingSettings
from toolref_server.settings.store import StoreSettings
from toolref_server.settings.summaries import SummarySettings

__all__ = ["LOCAL_TENANT", "TENANT_RE", "Settings", "parse_api_keys"]


class Settings(
    ServingSettings,
    ConnectionSettings,
    BodyLimits,
    AccessSettings,
    StoreSettings,
    RecordSettings,
    CacheSettings,
    SummarySettings,
    GatewaySettings,
    ContextSettings,
    BaseSettings,
):
    """Every setting of the service (the bases' fields). docs/api.md lists them with their
    defaults."""

    # No setting takes NaN or infinity (`inf` passed every `gt=0`, and no timeout, size or
    # rate works with it): a finite number, or the setting's default.
    model_config = SettingsConfigDict(
        env_prefix=PREFIX, frozen=True, extra="ignore", allow_inf_nan=False
    )

    @classmethod
    def variables(cls) -> list[str]:
        """The environment variable of each setting."""
        return [PREFIX + name.upper() for name in cls.model_fields]

    @classmethod
    def from_environment(cls) -> Settings:
        """The settings of this process's environment, once every `TOOLREF_*` variable in
        it is known (else `ConfigurationError` naming each unknown one and the setting it
        most likely meant: see `environment`)."""
        check_variables(os.environ, cls.variables())
        return cls()

    # What spans groups: exposure is the bind address (serving) against the keys (access).

    @property
    def tenant_inflated_limit(self) -> int | None:
        """Each tenant's share of the bodies in flight (`tenant_inflated_share`), where
        TOOLREF_API_KEYS names two tenants or more; None with one or none: no other tenant
        to keep room for, the budget is all its."""
        return self._among_tenants(self.tenant_inflated_share)

    @property
    def tenant_requests_limit(self) -> int | None:
        """Each tenant's registry requests in flight (`tenant_requests_share`), where
        TOOLREF_API_KEYS names two tenants or more; None with one or none (as above)."""
        return self._among_tenants(self.tenant_requests_share)

    @property
    def tenant_channel_limit(self) -> int | None:
        """Each tenant's channels open (`tenant_channels_share`), where TOOLREF_API_KEYS
        names two tenants or more; None with one or none (as above)."""
        return self._among_tenants(self.tenant_channels_share)

    @property
    def llm_tenant_calls_limit(self) -> int | None:
        """Each tenant's LLM calls under way (`llm_tenant_calls_share`), where
        TOOLREF_API_KEYS names two tenants or more; None with one or none (as above)."""
        return self._among_tenants(self.llm_tenant_calls_share)

    def _among_tenants(self, share: int) -> int | None:
        """`share`, one tenant's of what the process has, where TOOLREF_API_KEYS names two
        tenants or more (keys of one tenant count once); None with one or none."""
        return share if len(set(self.key_hashes.values())) >= 2 else None

    def check_context_summarizers(self) -> None:
        """Refuse a context editing policy whose summarizer this service does not offer
        (openai-compatible with no TOOLREF_LLM_BASE_URL)."""
        found = self.context_policy
        named = [("TOOLREF_CONTEXT_SUMMARIZER", found.default.summarizer)]
        for scope, table in (("upstreams", found.upstreams), ("tenants", found.tenants)):
            named += [
                (f"TOOLREF_CONTEXT_POLICIES {scope}.{name}", fields["summarizer"])
                for name, fields in table.items()
                if "summarizer" in fields
            ]
        for where, summarizer in named:
            if summarizer not in self.summarizer_names:
                raise ConfigurationError(
                    f"{where} is {summarizer} but TOOLREF_LLM_BASE_URL is not set; set it "
                    "(and TOOLREF_LLM_MODEL, TOOLREF_LLM_API_KEY), or use extractive"
                )

    def check_context_names(self) -> None:
        """Refuse a policy of TOOLREF_CONTEXT_POLICIES for an upstream or a tenant this
        service does not have: it would never apply, without a word (a misspelt name)."""
        found = self.context_policy
        tenants = sorted(set(self.key_hashes.values())) or [LOCAL_TENANT]
        for scope, table, known, setting in (
            ("upstreams", found.upstreams, sorted(self.upstream_urls), "TOOLREF_UPSTREAMS"),
            ("tenants", found.tenants, tenants, "TOOLREF_API_KEYS"),
        ):
            for name in table:
                if name in known:
                    continue
                guess = nearest(name, known)
                hint = f"; did you mean {guess!r}?" if guess else ""
                has = ", ".join(known) or "none"
                raise ConfigurationError(
                    f"TOOLREF_CONTEXT_POLICIES {scope}.{name} names no {scope[:-1]} of this "
                    f"service ({setting} gives: {has}), so that policy would never "
                    f"apply{hint}; fix the name, or remove its policy"
                )

    @model_validator(mode="after")
    def _check_tenant_requests(self) -> Self:
        """Refuse a gateway where one tenant's requests in flight could take every slot of
        the process's, where TOOLREF_API_KEYS names two tenants or more: the others would
        all be refused (503) while that tenant's requests last. The same for a tenant's
        share of the registry's requests in flight, of the connections (its channels) and
        of the LLM's connections (its model calls)."""
        tenants = len(set(self.key_hashes.values()))
        own, every = self.gateway_tenant_requests_in_flight, self.gateway_max_requests_in_flight
        if tenants >= 2 and self.upstream_urls and own >= every:
            raise ValueError(
                f"TOOLREF_GATEWAY_TENANT_REQUESTS_IN_FLIGHT ({own}) is not below "
                f"TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT ({every}), so one of the {tenants} "
                "tenants of TOOLREF_API_KEYS could hold every gateway request slot of the "
                f"process and the others would be refused; lower it below {every} (an eighth "
                "of it is the default), or raise TOOLREF_GATEWAY_MAX_REQUESTS_IN_FLIGHT"
            )
        for share, setting, whole, whole_setting in (
            (
                self.tenant_requests_in_flight,
                "TOOLREF_TENANT_REQUESTS_IN_FLIGHT",
                self.max_requests_in_flight,
                "TOOLREF_MAX_REQUESTS_IN_FLIGHT",
            ),
            (
                self.tenant_channels,
                "TOOLREF_TENANT_CHANNELS",
                self.max_connections,
                "TOOLREF_MAX_CONNECTIONS",
            ),
            (
                self.llm_tenant_calls_in_flight,
                "TOOLREF_LLM_TENANT_CALLS_IN_FLIGHT",
                self.llm_max_connections,
                "TOOLREF_LLM_MAX_CONNECTIONS",
            ),
        ):
            if tenants >= 2 and share is not None and share >= whole:
                raise ValueError(
                    f"{setting} ({share}) is not below {whole_setting} ({whole}), so one of "
                    f"the {tenants} tenants of TOOLREF_API_KEYS could hold all of them and "
                    f"the others would be refused; lower it below {whole} (unset: a quarter "
                    f"of it), or raise {whole_setting}"
                )
        return self

    def check_exposure(self) -> None:
        """Refuse to serve an unauthenticated registry beyond this machine."""
        if not self.key_hashes and not self.is_loopback:
            raise ConfigurationError(
                f"refusing to bind {self.host!r} with no API keys: anyone who can reach it "
                "could read every payload. Set TOOLREF_API_KEYS to `tenant=<sha256 hex>` "
                "(`toolref-server keygen TENANT` makes one), or bind 127.0.0.1."
            )

    def warn_open_metrics(self) -> str | None:
        """What to warn about when /metrics and /v1/savings have no key of their own on a
        service others reach (bound beyond loopback, or with tenants' keys: a proxy in front),
        else None. Without the key they answer requests made on this machine only."""
        if self.metrics_key or (self.is_loopback and not self.key_hashes):
            return None
        return (
            "TOOLREF_METRICS_KEY is not set: GET /metrics and /v1/savings (request counts and "
            "bytes per tenant) answer only requests made on this machine (a loopback peer, no "
            "proxy header, a Host of localhost or a loopback address), 403 to any other. A "
            "proxy on this machine that adds no X-Forwarded-For or Forwarded header makes "
            "every client local. To scrape from elsewhere or behind a proxy, set "
            "TOOLREF_METRICS_KEY to the SHA-256 of a scraper key (`toolref-server hash-key "
            "KEY`) and send the key as a bearer token"
        )
