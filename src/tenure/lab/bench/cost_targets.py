"""The figures reported beside their baselines with no threshold: what a job costs in Tenure's
drain against the raw loop's in the same drain (CPU, WAL, index writes), and the drains with more
processes against each contender's own at the run's process count."""

from __future__ import annotations

from typing import Any

from tenure.lab.bench.rows import fmt
from tenure.lab.bench.verdicts import Sections, Target, jobs_label, reported, why_missing

#: What a job costs in the drain, each reported beside the raw loop's from the same drain: the
#: key in the drain's result, the unit, and the figure's name.
COSTS = (
    ("worker_cpu_us_per_job", "us/job", "worker CPU per job"),
    ("server_cpu_us_per_job", "us/job", "server CPU per job (the workers' backends)"),
    ("wal_bytes_per_job", "bytes/job", "WAL per job"),
    ("non_hot_updates_per_job", "per job", "index writes: non-HOT updates per job"),
    ("hot_updates_per_job", "per job", "index writes: HOT updates per job"),
)


def _index_note(tp: Sections, key: str) -> str:
    """What the updates write to indexes, and why they stand for the index writes (the counters
    count row writes, not index entries)."""
    if key == "hot_updates_per_job":
        return "a HOT update writes no index entry"
    table = tp.get("jobs_table", {})
    inserts = tp["tenure_n"].get("inserts_per_job"), _reference(tp).get("inserts_per_job")
    return (
        "a non-HOT update enters its new row version in every index whose predicate admits it: "
        f"the jobs table has {table.get('indexes')} indexes, {table.get('partial_indexes')} of them "
        "partial, and which partial ones a version entered the counters do not tell; inserts per "
        f"job {fmt(inserts[0])} (raw SQL {fmt(inserts[1])})"
    )


def _reference(tp: Sections) -> dict[str, Any]:
    """The raw loop at the reference claim size in the drain of the largest size."""
    reference: dict[str, Any] = tp["by_size"][str(tp["primary_size"])]["raw_reference"]
    return reference


def cost_targets(s: Sections) -> list[Target]:
    """Per job in Tenure's N-process drain of the largest size, beside the raw loop's at the
    reference claim size in the same size of drain."""
    tp = s.get("throughput")
    found = []
    for key, unit, label in COSTS:
        if not tp:
            found.append(reported(label, None, unit, "raw SQL", None, why_missing(s, "throughput")))
            continue
        reference = _reference(tp)
        value, note = tp["tenure_n"].get(key), ""
        if key.endswith("updates_per_job"):
            note = _index_note(tp, key) if value is not None else "the workers' sessions did not all exit"
        elif value is None:
            note = "the server is not on this machine"
        baseline = f"raw SQL claim {reference['batch']}, same drain size"
        name = f"{label}, {tp['processes']}-process drain of {jobs_label(tp['primary_size'])}"
        found.append(reported(name, value, unit, baseline, reference.get(key), note))
    return found


def contention_targets(s: Sections) -> list[Target]:
    """Each contender's drain with more processes against its own at the run's process count."""
    crowd, tp = s.get("contention"), s.get("throughput")
    if not crowd:
        why = why_missing(s, "contention")
        return [
            reported(f"drain with 8 processes, {who}", None, "jobs/s", "the same, N processes", None, why)
            for who in ("tenure", "raw SQL claim 100")
        ]
    at = tp["by_size"].get(str(crowd["jobs"]), {}) if tp else {}
    why = "" if at else why_missing(s, "throughput") or f"no drain of {jobs_label(crowd['jobs'])}"
    processes = f"{tp['processes']} processes" if tp else "the run's processes"
    found = []
    for key, against, who in (
        ("tenure", "tenure_n", "tenure"),
        ("raw", "raw_reference", f"raw SQL claim {crowd['raw']['batch']}"),
    ):
        name = f"drain with {crowd['processes']} processes, {who}, {jobs_label(crowd['jobs'])}"
        baseline = at.get(against, {}).get("jobs_per_second")
        found.append(
            reported(name, crowd[key]["jobs_per_second"], "jobs/s", f"{who}, {processes}", baseline, why)
        )
    return found
