"""Figures of the drains: Tenure against the ceiling at each size, the ceiling's sweep, the peers
at their best settings, start-up, and what each job costs (WAL, commits, CPU, memory)."""

from __future__ import annotations

from typing import Any

from tenure.lab.bench.rows import Row, at_least, row


def _jobs(size: str | int) -> str:
    return f"{int(size):,} jobs"


def throughput_rows(tp: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for size, at in tp["by_size"].items():
        ceiling = at["ceiling"]
        ceiling_label = f"ceiling: raw SQL claim {ceiling['batch']}"
        r = row(
            "throughput",
            f"tenure, N processes, {_jobs(size)}",
            at["tenure_n"]["jobs_per_second"],
            "jobs/s",
            ceiling_label,
            ceiling["jobs_per_second"],
            ">= 0.6x",
        )
        r["met"] = at_least(r["ratio"], 0.6)
        rows.append(r)
        for batch, swept in at["ceiling_sweep"].items():
            won = " (the ceiling)" if int(batch) == ceiling["batch"] else ""
            rows.append(
                row(
                    "throughput",
                    f"raw SQL claim {batch}, {swept['loops']} loop(s) a process, {_jobs(size)}{won}",
                    swept["jobs_per_second"],
                    "jobs/s",
                    ceiling_label,
                    ceiling["jobs_per_second"],
                )
            )
    primary = _jobs(tp["primary_size"])
    rows.append(
        row(
            "throughput",
            f"tenure, 1 process, {primary}",
            tp["tenure_1"]["jobs_per_second"],
            "jobs/s",
            f"raw SQL, 1 process, claim {tp['raw_1']['batch']}",
            tp["raw_1"]["jobs_per_second"],
        )
    )
    startup = tp["startup_seconds"]
    rows.append(
        row(
            "start-up",
            "worker process, spawn to first claim: tenure",
            startup["tenure"],
            "s",
            "raw SQL loop",
            startup["raw"],
        )
    )
    return rows


def peer_rows(tp: dict[str, Any], peers: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    pgq = peers.get("pgqueuer", {})
    for size, at in pgq.get("by_size", {}).items():
        best = at["best"]
        ceiling = tp["by_size"].get(size, {}).get("ceiling", {}) if tp else {}
        for batch, swept in at["batch_sweep"].items():
            won = " (its best)" if int(batch) == best["batch"] else ""
            rows.append(
                row(
                    "peers",
                    f"pgqueuer batch {batch}, {_jobs(size)}{won}",
                    swept["jobs_per_second"],
                    "jobs/s",
                    "the ceiling",
                    ceiling.get("jobs_per_second"),
                )
            )
        if tp and size in tp["by_size"]:
            r = row(
                "peers",
                f"tenure vs pgqueuer (batch {best['batch']}), {_jobs(size)}",
                tp["by_size"][size]["tenure_n"]["jobs_per_second"],
                "jobs/s",
                "pgqueuer",
                best["jobs_per_second"],
                ">= 2.5x",
            )
            r["met"] = at_least(r["ratio"], 2.5)
            rows.append(r)
    pro = peers.get("procrastinate", {})
    for size, drained in pro.get("by_size", {}).items():
        setting = f"concurrency {pro['concurrency_per_process']}, pool {pro['pool_max_size']}"
        rows.append(
            row(
                "peers",
                f"procrastinate ({setting}), {_jobs(drained['jobs'])}",
                drained["jobs_per_second"],
                "jobs/s",
                "the ceiling",
                tp["by_size"].get(size, {}).get("ceiling", {}).get("jobs_per_second") if tp else None,
            )
        )
        if tp and size in tp["by_size"]:
            r = row(
                "peers",
                f"tenure ({_jobs(size)}) vs procrastinate ({_jobs(drained['jobs'])})",
                tp["by_size"][size]["tenure_n"]["jobs_per_second"],
                "jobs/s",
                "procrastinate",
                drained["jobs_per_second"],
                ">= 20x",
            )
            r["met"] = at_least(r["ratio"], 20)
            rows.append(r)
    return rows


def cost_rows(tp: dict[str, Any]) -> list[Row]:
    """What a job costs in the N-process drains of the largest size: Tenure against the ceiling,
    and the raw loop at Tenure's own claim size beside it (what the claim size alone changes)."""
    tenure, raw = tp["tenure_n"], tp["raw_n"]
    same_batch = tp["by_size"][str(tp["primary_size"])]["raw_claim_batch"]
    rows: list[Row] = []
    for key, unit, label in (
        ("wal_bytes_per_job", "bytes", "WAL per job"),
        ("commits_per_job", "commits", "commits per job"),
        ("worker_cpu_us_per_job", "us", "worker CPU per job"),
        ("server_cpu_us_per_job", "us", "server CPU per job (the workers' backends)"),
    ):
        if tenure.get(key) is None:
            continue  # server CPU: the server is not on this machine
        r = row("cost", f"{label}, tenure", tenure.get(key), unit, "the ceiling", raw.get(key))
        if key == "wal_bytes_per_job":
            r["target"], r["met"] = "<= 1024 B", tenure[key] <= 1024
        rows.append(r)
        if same_batch["batch"] != raw["batch"]:
            figure = f"{label}, raw SQL claim {same_batch['batch']}"
            rows.append(row("cost", figure, same_batch.get(key), unit, "the ceiling", raw.get(key)))
    rows.append(
        row(
            "cost",
            "worker peak RSS, tenure",
            tenure["peak_rss_mib"],
            "MiB",
            "raw SQL worker",
            raw["peak_rss_mib"],
        )
    )
    return rows
