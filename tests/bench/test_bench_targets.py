"""The targets table's verdicts, from results as the runner writes them (no server needed)."""

from __future__ import annotations

from typing import Any

from tenure.lab.bench.targets import MET, NOT_MEASURED, NOT_MET, targets


def _drain(rate: float) -> dict[str, Any]:
    return {"jobs_per_second": rate, "worker_cpu_us_per_job": 100.0}


def _throughput(tenure: float, ceiling: float) -> dict[str, Any]:
    at = {"tenure_n": _drain(tenure), "ceiling": _drain(ceiling) | {"batch": 100}}
    return {
        "by_size": {"30000": at, "50000": at},
        "ceiling_batches": [20, 100],
        "primary_size": 50000,
        "tenure_n": at["tenure_n"],
        "raw_n": at["ceiling"],
    }


def test_a_run_with_no_sections_measures_no_target() -> None:
    """With no section run, every target is listed and every one is 'not measured', none met."""
    found = targets({"sections": {}})
    assert len(found) >= 11
    assert {t["status"] for t in found} == {NOT_MEASURED}
    assert all(t["note"] for t in found if t["target"] != "worker CPU per job, measured and reported")


def test_drain_targets_compare_with_the_ceiling_at_each_size() -> None:
    """Tenure at 0.6x the ceiling meets the drain target at both sizes; at 0.5x it does not."""
    met = [
        t for t in targets({"sections": {"throughput": _throughput(600, 1000)}}) if "ceiling" in t["target"]
    ]
    assert [t["status"] for t in met] == [MET, MET]
    assert met[0]["ratio"] == 0.6 and "raw SQL claim 100" in met[0]["baseline"]
    short = [
        t for t in targets({"sections": {"throughput": _throughput(500, 1000)}}) if "ceiling" in t["target"]
    ]
    assert [t["status"] for t in short] == [NOT_MET, NOT_MET]


def test_million_job_targets_are_not_measured_below_a_million() -> None:
    """A backlog or a not-yet-due load below 1M jobs leaves those targets 'not measured', with
    the figure and the size it was taken at shown."""
    level = {"pending": 100_000, "jobs_per_second": 900.0}
    sections = {
        "throughput": _throughput(1000, 1500),
        "backlog": {"levels": [level]},
        "scheduled": {
            "not_yet_due": 100_000,
            "due": 100,
            "claim_ms_with_not_yet_due": 1.0,
            "claim_ms_due_only": 1.0,
        },
    }
    found = {t["target"]: t for t in targets({"sections": sections})}
    backlog = found["drain with 1M pending vs an empty queue's"]
    assert backlog["status"] == NOT_MEASURED and backlog["ratio"] == 0.9 and "100,000" in backlog["note"]
    assert found["claim time with 1M not yet due vs due jobs only"]["status"] == NOT_MEASURED
    level["pending"] = 1_000_000
    sections["scheduled"]["not_yet_due"] = 1_000_000
    found = {t["target"]: t for t in targets({"sections": sections})}
    assert found["drain with 1M pending vs an empty queue's"]["status"] == MET
    assert found["claim time with 1M not yet due vs due jobs only"]["status"] == MET
