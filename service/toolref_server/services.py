"""What the routes share, built once in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from toolref.asgi.workers import Workers
from toolref_server.documents import BodyLimits
from toolref_server.http.auth import Authenticator
from toolref_server.metrics import Metrics
from toolref_server.registry.summary_cache import SummaryCache
from toolref_server.settings import Settings
from toolref_server.storage.answers import Answers
from toolref_server.storage.quotas import RequestRate
from toolref_server.storage.recipes import Recipes
from toolref_server.storage.store import Store
from toolref_server.storage.usage_counters import UsageCounters


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store
    auth: Authenticator
    limits: BodyLimits
    summaries: SummaryCache
    metrics: Metrics
    workers: Workers
    rate: RequestRate
    recipes: Recipes
    usage: UsageCounters
    answers: Answers
