"""Figures of the drains: Tenure against the raw loop and the ceiling at each size, the ceiling's
sweep, the peers at their best settings, start-up, what each job costs (WAL, commits, CPU, row
writes, memory), and the drains with more processes."""

from __future__ import annotations

from typing import Any

from tenure.lab.bench.rows import Row, ratio_at_least, row, value_at_most
from tenure.lab.bench.verdicts import setting_suffix, tenure_beside_pgqueuer, tenure_setting


def _jobs(size: str | int) -> str:
    return f"{int(size):,} jobs"


def throughput_rows(tp: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for size, at in tp["by_size"].items():
        ceiling, reference = at["ceiling"], at["raw_reference"]
        ceiling_label = f"ceiling: raw SQL claim {ceiling['batch']}"
        best = at.get("tenure_best", at["tenure_n"])
        tenure = best["jobs_per_second"]
        reference_label = f"raw SQL claim {reference['batch']}"
        rows += [
            row(
                "throughput",
                f"tenure at its best, N processes, {_jobs(size)}{setting_suffix(best)}",
                tenure,
                "jobs/s",
                reference_label,
                reference["jobs_per_second"],
                ">= 0.6x",
                ratio_at_least(0.6),
            ),
            row(
                "throughput",
                f"tenure at its best, N processes, {_jobs(size)}, against the ceiling",
                tenure,
                "jobs/s",
                ceiling_label,
                ceiling["jobs_per_second"],
            ),
        ]
        for swept in at.get("tenure_sweep", {}).values():
            rows.append(
                row(
                    "throughput",
                    f"tenure, N processes, {_jobs(size)}{setting_suffix(swept)}",
                    swept["jobs_per_second"],
                    "jobs/s",
                    reference_label,
                    reference["jobs_per_second"],
                )
            )
        for batch, swept in at["ceiling_sweep"].items():
            won = " (the ceiling)" if int(batch) == ceiling["batch"] else ""
            figure = f"raw SQL claim {batch}, {swept['loops']} loop(s) a process, {_jobs(size)}{won}"
            rows.append(
                row(
                    "throughput",
                    figure,
                    swept["jobs_per_second"],
                    "jobs/s",
                    ceiling_label,
                    ceiling["jobs_per_second"],
                )
            )
    raw_1 = f"raw SQL, 1 process, claim {tp['raw_1']['batch']}"
    rows.append(
        row(
            "throughput",
            f"tenure, 1 process, {_jobs(tp['primary_size'])}",
            tp["tenure_1"]["jobs_per_second"],
            "jobs/s",
            raw_1,
            tp["raw_1"]["jobs_per_second"],
        )
    )
    startup = tp["startup_seconds"]
    figure = "worker process, spawn to first claim: tenure"
    rows.append(row("start-up", figure, startup["tenure"], "s", "raw SQL loop", startup["raw"]))
    return rows


def peer_rows(tp: dict[str, Any], peers: dict[str, Any]) -> list[Row]:
    """Each peer's drains against the ceiling of the same size, then Tenure against the peer."""
    rows: list[Row] = []
    pgq = peers.get("pgqueuer", {})
    for size, at in pgq.get("by_size", {}).items():
        best = at["best"]
        for batch, swept in at["batch_sweep"].items():
            won = " (its best)" if int(batch) == best["batch"] else ""
            rows.append(_against_the_ceiling(tp, size, f"pgqueuer batch {batch}, {_jobs(size)}{won}", swept))
        tenure_best = tenure_beside_pgqueuer(at, None)
        for drained in at.get("tenure_sweep", {}).values():
            won = " (its best)" if drained == tenure_best else ""
            figure = f"tenure {tenure_setting(drained)}, {_jobs(size)}{won}"
            rows.append(_against_the_ceiling(tp, size, figure, drained))
        vs = f"tenure{setting_suffix(tenure_best)} vs pgqueuer (batch {best['batch']}), {_jobs(size)}"
        rows += _tenure_against(tp, size, vs, "pgqueuer", best, 1.3, tenure_best)
    pro = peers.get("procrastinate", {})
    for size, drained in pro.get("by_size", {}).items():
        setting = f"concurrency {pro['concurrency_per_process']}, pool {pro['pool_max_size']}"
        figure = f"procrastinate ({setting}), {_jobs(drained['jobs'])}"
        rows.append(_against_the_ceiling(tp, size, figure, drained))
        vs = f"tenure ({_jobs(size)}) vs procrastinate ({_jobs(drained['jobs'])})"
        rows += _tenure_against(tp, size, vs, "procrastinate", drained)
    return rows


def _against_the_ceiling(tp: dict[str, Any] | None, size: str, figure: str, drained: dict[str, Any]) -> Row:
    """A peer's drain against the ceiling at the same size (none where throughput did not run)."""
    ceiling = tp["by_size"].get(size, {}).get("ceiling", {}).get("jobs_per_second") if tp else None
    return row("peers", figure, drained["jobs_per_second"], "jobs/s", "the ceiling", ceiling)


def _tenure_against(
    tp: dict[str, Any] | None,
    size: str,
    figure: str,
    peer: str,
    drained: dict[str, Any],
    bound: float | None = None,
    beside: dict[str, Any] | None = None,
) -> list[Row]:
    """Tenure's drain against a peer's at the same size, held to `bound` times the peer's rate
    where there is a target; `beside`: Tenure's drain from the peer's own rounds, where it ran."""
    if beside is None:
        if not tp or size not in tp["by_size"]:
            return []
        beside = tp["by_size"][size]["tenure_n"]
    tenure = beside["jobs_per_second"]
    target = (f">= {bound:g}x", ratio_at_least(bound)) if bound is not None else ("", None)
    return [row("peers", figure, tenure, "jobs/s", peer, drained["jobs_per_second"], *target)]


def cost_rows(tp: dict[str, Any]) -> list[Row]:
    """What a job costs in the N-process drains of the largest size: Tenure against the ceiling,
    and the raw loop at Tenure's own claim size beside it (what the claim size alone changes)."""
    tenure, raw = tp["tenure_n"], tp["raw_n"]
    same_batch = tp["by_size"][str(tp["primary_size"])]["raw_claim_batch"]
    rows: list[Row] = []
    for key, unit, label, target, rule in (
        ("wal_bytes_per_job", "bytes", "WAL per job", "<= 1024 B", value_at_most(1024)),
        ("commits_per_job", "commits", "commits per job", "", None),
        ("worker_cpu_us_per_job", "us", "worker CPU per job", "", None),
        ("server_cpu_us_per_job", "us", "server CPU per job (the workers' backends)", "", None),
        ("non_hot_updates_per_job", "updates", "non-HOT updates per job", "", None),
        ("hot_updates_per_job", "updates", "HOT updates per job", "", None),
    ):
        if tenure.get(key) is None:
            continue  # server CPU: the server is elsewhere; row writes: a session stayed (table_writes.py)
        rows.append(
            row("cost", f"{label}, tenure", tenure[key], unit, "the ceiling", raw.get(key), target, rule)
        )
        if same_batch["batch"] != raw["batch"]:
            figure = f"{label}, raw SQL claim {same_batch['batch']}"
            rows.append(row("cost", figure, same_batch.get(key), unit, "the ceiling", raw.get(key)))
    figure = "worker peak RSS, tenure"
    rows.append(row("cost", figure, tenure["peak_rss_mib"], "MiB", "raw SQL worker", raw["peak_rss_mib"]))
    return rows


def contention_rows(s: dict[str, Any]) -> list[Row]:
    """Each contender's drain with more processes against its own at the run's process count,
    and Tenure against the raw loop among as many processes."""
    crowd, tp = s["contention"], s.get("throughput")
    at = tp["by_size"].get(str(crowd["jobs"]), {}) if tp else {}
    n, jobs = crowd["processes"], _jobs(crowd["jobs"])
    raw = f"raw SQL claim {crowd['raw']['batch']}"
    rows = [
        row("contention", f"{who}, {n} processes, {jobs}", crowd[key]["jobs_per_second"], "jobs/s",
            f"{who}, N processes", at.get(against, {}).get("jobs_per_second"))
        for key, against, who in (("tenure", "tenure_n", "tenure"), ("raw", "raw_reference", raw))
    ]  # fmt: skip
    rows.append(
        row("contention", f"tenure, {n} processes, {jobs}", crowd["tenure"]["jobs_per_second"], "jobs/s",
            f"{raw}, {n} processes", crowd["raw"]["jobs_per_second"])
    )  # fmt: skip
    return rows
