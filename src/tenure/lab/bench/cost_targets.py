"""What a job costs in Tenure's drain: its CPU, worker and server together, against PgQueuer's at
its best (a target), and each figure beside the raw loop's in the same drain and PgQueuer's (CPU,
WAL, row writes, the index entries of its path); and the drains with more processes against each
contender's own at the run's process count."""

from __future__ import annotations

from typing import Any

from tenure.lab.bench.index_entries import describe
from tenure.lab.bench.rows import fmt, ratio_at_most
from tenure.lab.bench.verdicts import (
    Sections,
    Target,
    jobs_label,
    reported,
    target,
    tenure_beside_pgqueuer,
    why_missing,
)

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
    """What the updates write to indexes: the entries a job's path writes, counted on the schema
    (index_entries.py), since the counters count row writes, not index entries."""
    if key == "hot_updates_per_job":
        return "a HOT update writes no index entry"
    table = tp.get("jobs_table", {})
    inserts = tp["tenure_n"].get("inserts_per_job"), _reference(tp).get("inserts_per_job")
    return (
        "a non-HOT update enters its new row version in every index whose predicate admits it "
        f"(the jobs table has {table.get('indexes')} indexes, {table.get('partial_indexes')} of them "
        f"partial; which ones, in the index entries row); inserts per job {fmt(inserts[0])} "
        f"(raw SQL {fmt(inserts[1])})"
    )


def _reference(tp: Sections) -> dict[str, Any]:
    """The raw loop at the reference claim size in the drain of the largest size."""
    reference: dict[str, Any] = tp["by_size"][str(tp["primary_size"])]["raw_reference"]
    return reference


def _pgqueuer_at(s: Sections, size: int) -> dict[str, Any] | None:
    """The peers section's PgQueuer figures at `size`, None where it was not measured."""
    found: dict[str, Any] | None = s.get("peers", {}).get("pgqueuer", {}).get("by_size", {}).get(str(size))
    return found


def _pgqueuer_best(s: Sections, size: int) -> dict[str, Any] | None:
    """PgQueuer's best drain of `size` (the peers section), None where it was not measured."""
    drained = _pgqueuer_at(s, size)
    return None if drained is None else dict(drained["best"])


def _cpu_total(drained: dict[str, Any] | None) -> float | None:
    if drained is None:
        return None
    worker, server = drained.get("worker_cpu_us_per_job"), drained.get("server_cpu_us_per_job")
    return None if worker is None or server is None else float(worker) + float(server)


def cpu_targets(s: Sections) -> list[Target]:
    """CPU per job, worker and server together, against PgQueuer at its best batch in a drain of
    the same size (on two cores shared by workers and server, a drain runs at about one job per
    that many microseconds); then each side beside PgQueuer's."""
    tp = s.get("throughput")
    name = "CPU per job, worker + server, vs pgqueuer at its best batch"
    if not tp:
        why = why_missing(s, "throughput")
        return [target(name, "<= 0.77x", None, "us/job", "pgqueuer", None, None, why)]
    size = tp["primary_size"]
    name = f"{name}, {tp['processes']}-process drain of {jobs_label(size)}"
    pgq = _pgqueuer_best(s, size)
    why = "" if pgq else why_missing(s, "peers") or "pgqueuer not measured"
    baseline = f"pgqueuer batch {pgq['batch']}" if pgq else "pgqueuer"
    beside: dict[str, Any] = tenure_beside_pgqueuer(_pgqueuer_at(s, size) or {}, tp["tenure_n"]) or {}
    tenure = _cpu_total(beside)
    if tenure is None and not why:
        why = "the server is not on this machine"
    # Not measured without PgQueuer's figure: a target is judged against its baseline only.
    judged = tenure if _cpu_total(pgq) is not None else None
    found = [target(name, "<= 0.77x", judged, "us/job", baseline, _cpu_total(pgq), ratio_at_most(0.77), why)]
    for key, side in (("worker_cpu_us_per_job", "worker"), ("server_cpu_us_per_job", "server")):
        value = beside.get(key)
        found.append(
            reported(
                f"{side} CPU per job vs pgqueuer, {jobs_label(size)}",
                value,
                "us/job",
                baseline,
                None if pgq is None else pgq.get(key),
                why,
            )
        )
    return found


def cost_targets(s: Sections) -> list[Target]:
    """Per job in Tenure's N-process drain of the largest size, beside the raw loop's at the
    reference claim size in the same size of drain; the CPU beside PgQueuer's too; and the index
    entries a job writes."""
    tp = s.get("throughput")
    found = cpu_targets(s)
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
    found.append(_index_entries_row(s))
    return found


def _index_entries_row(s: Sections) -> Target:
    """The index entries a job writes over its path, by step, counted on the schema."""
    name = "index entries per job (enqueue, claim, completion)"
    entries = s.get("throughput", {}).get("jobs_table")
    if not entries or "per_job" not in entries:
        why = (entries or {}).get("error") or why_missing(s, "throughput")
        return reported(name, None, "per job", "", None, why)
    # The raw loop writes the same rows to the same table: its entries are Tenure's.
    return reported(name, entries["per_job"], "per job", "", None, describe(entries))


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
