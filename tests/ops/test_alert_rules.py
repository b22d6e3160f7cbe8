"""The shipped Prometheus alert rules parse as PromQL, name only metrics the exporters emit,
and alert on the age of work, never on counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry

from tenure.ops.metrics import DatabaseCollector, RuntimeMetrics

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
#: Gauges that count jobs: alerting on them fires on a healthy long queue (M: "not on counts").
COUNT_GAUGES = {"tenure_jobs", "tenure_dead_jobs"}


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (raises ValueError if it does not parse)."""
    names: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def exported_names(dsn: str) -> set[str]:
    """Every sample name a worker's endpoint can emit: runtime metrics plus the database gauges."""
    registry = CollectorRegistry()
    RuntimeMetrics(registry, busy=lambda: 0, concurrency=1)
    database = DatabaseCollector(dsn)
    registry.register(database)
    names: set[str] = set()
    try:
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + s for s in SUFFIXES.get(family.type, ()))
    finally:
        database.close()
    return names


def test_every_rule_parses_and_names_only_exported_metrics(dsn: str) -> None:
    """Each rule's expression parses as PromQL and every metric in it is in the exporter's output."""
    exported = exported_names(dsn)
    assert "tenure_oldest_claimable_age_seconds" in exported and "tenure_fencing_losses_total" in exported
    found = rules()
    assert len(found) >= 4
    for rule in found:
        names = metric_names(rule["expr"])
        assert names, f"{rule['alert']} selects no metric"
        assert names <= exported, f"{rule['alert']} names metrics no exporter emits: {names - exported}"
        assert not names & COUNT_GAUGES, f"{rule['alert']} alerts on a count"
        assert rule.get("annotations", {}).get("summary"), f"{rule['alert']} has no summary"


def test_the_checker_rejects_bad_expressions_and_unknown_names() -> None:
    """The checks above can fail: a syntax error raises, and a misspelt metric is reported by name."""
    with pytest.raises(ValueError):
        metric_names("max by (queue) (tenure_oldest_claimable_age_seconds > ")
    assert metric_names("rate(tenure_fencing_loses_total[5m]) > 0") == {"tenure_fencing_loses_total"}
