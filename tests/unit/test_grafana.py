"""deploy/grafana/toolref.json, the Grafana dashboard: every PromQL query in it names only
metrics the service exports (read from the service's own registry, with the sample names
each kind of metric gives), groups by labels those metrics have, and the dashboard shows
what an operator looks for: bytes saved per tenant and upstream, requests, resends,
latency, the memory budget."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from toolref_server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "toolref.json"

# PromQL words that are not metric names: functions (followed by "("), aggregations,
# keywords, and Grafana's variables.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
}


def exported() -> dict[str, set[str]]:
    """Each sample name the service exports, and its labels (`le` on buckets)."""
    found: dict[str, set[str]] = {}
    declared = [m for m in vars(Metrics()).values() if isinstance(m, MetricWrapperBase)]
    for metric in declared:
        for family in metric.describe():
            labels = set(metric._labelnames)
            for suffix in SUFFIXES[family.type]:
                found[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return found


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every query: each panel's targets and each query variable."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", query)
            assert match, f"variable {variable['name']}: {query}"
            yield f"variable {variable['name']}", f"sum by ({match[2]}) ({match[1]})"


def parsed(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, labels grouped by or matched on) of a PromQL expression."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\$\w+", "", text)  # Grafana's variables ($__rate_interval, $tenant)
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels |= {name.strip() for name in group.split(",") if name.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", text):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", text)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)  # matchers, ranges
    names = {
        word
        for word, call in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\()?", text)
        if not call and word.lower() not in KEYWORDS
    }
    return names, labels


def load() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return found


def test_the_parser_finds_names_and_labels() -> None:
    assert parsed(
        'histogram_quantile(0.95, sum by (le, route) (rate(x_bucket{a="b{c}", d=~"$e"}[5m])))'
        " / on (route) group_left y_total"
    ) == ({"x_bucket", "y_total"}, {"le", "route", "a", "d"})


@pytest.mark.parametrize(("where", "expr"), list(expressions(load())))
def test_every_query_names_a_metric_the_service_exports(where: str, expr: str) -> None:
    names, labels = parsed(expr)
    known = exported()
    assert names, f"{where}: no metric in {expr}"
    assert names <= set(known), f"{where}: {sorted(names - set(known))} not exported"
    has = set().union(*(known[name] for name in names))
    assert labels <= has, f"{where}: labels {sorted(labels - has)} on none of {sorted(names)}"


def test_the_dashboard_shows_what_an_operator_looks_for() -> None:
    dashboard = load()
    queries = " ".join(expr for _, expr in expressions(dashboard))
    for metric in (
        "toolref_upload_bytes_total",
        "toolref_gateway_requests_total",
        "toolref_gateway_resends_total",
        "toolref_request_duration_seconds_bucket",
        "toolref_inflated_bytes_in_flight",
        "toolref_inflated_bytes_limit",
    ):
        assert metric in queries, metric
    assert "sum by (tenant, upstream)" in queries
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {
        "datasource",
        "tenant",
        "upstream",
    }


def test_a_query_naming_an_unknown_metric_is_caught() -> None:
    names, _ = parsed("sum(rate(toolref_upload_bytes{kind='raw'}[5m]))")
    assert names == {"toolref_upload_bytes"}
    assert not names <= set(exported())  # the counter's sample is ..._total
