"""The result as figures with their baselines: a table on the terminal, rows in the JSON, a chart."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenure.lab.bench.rows import Row, at_least, at_most, fmt, row
from tenure.lab.bench.targets import print_targets
from tenure.lab.bench.throughput_rows import cost_rows, peer_rows, throughput_rows

#: Where the machine's CPU goes per job end to end, in the order a job meets it.
END_TO_END_CPU = (
    ("producer_cpu_us_per_job", "producers' CPU"),
    ("producer_server_cpu_us_per_job", "server CPU for the producers (their backends)"),
    ("worker_cpu_us_per_job", "workers' CPU"),
    ("worker_server_cpu_us_per_job", "server CPU for the workers (their backends)"),
)


def end_to_end_rows(e2e: dict[str, Any]) -> list[Row]:
    """The end-to-end rates and, per job, the CPU each side spent, Tenure against raw SQL."""
    tenure, raw = e2e["tenure"], e2e["raw"]
    baseline = f"raw SQL (claim {e2e['raw_claim_batch']})"
    rows = [
        row("endtoend", "producers' enqueue rate, tenure", tenure["enqueue_jobs_per_second"], "jobs/s",
            baseline, raw["enqueue_jobs_per_second"]),
    ]  # fmt: skip
    for key, label in END_TO_END_CPU:
        rows.append(
            row("endtoend", f"{label} per job, tenure", tenure.get(key), "us", baseline, raw.get(key))
        )
    return rows


def figure_rows(result: dict[str, Any]) -> list[Row]:
    s = result["sections"]
    rows: list[Row] = []
    tp = s.get("throughput")
    if tp:
        rows += throughput_rows(tp)
    rows += peer_rows(tp, s.get("peers", {}))
    if tp:
        rows += cost_rows(tp)
    if s.get("endtoend"):
        rows += end_to_end_rows(s["endtoend"])
    lat = s.get("latency")
    if lat:
        pgq = s.get("peers", {}).get("pgqueuer", {}).get("idle_latency", {})
        for pct in ("p50_ms", "p99_ms"):
            r = row(
                "latency",
                f"idle {pct[:3]}, tenure",
                lat["idle"][pct],
                "ms",
                "pgqueuer idle",
                pgq.get(pct),
                "< 1x pgqueuer",
            )
            r["met"] = None if r["ratio"] is None else r["ratio"] < 1
            rows.append(r)
        for name in ("pgqueuer", "procrastinate"):
            peer_lat = s.get("peers", {}).get(name, {}).get("idle_latency")
            if peer_lat:
                for pct in ("p50_ms", "p99_ms"):
                    rows.append(
                        row(
                            "latency",
                            f"idle {pct[:3]}, {name}",
                            peer_lat[pct],
                            "ms",
                            "tenure idle",
                            lat["idle"][pct],
                        )
                    )
        for pct in ("p50_ms", "p99_ms"):
            rows.append(
                row(
                    "latency",
                    f"half load {pct[:3]}, tenure",
                    lat["half_load"][pct],
                    "ms",
                    "tenure idle",
                    lat["idle"][pct],
                )
            )
    bl = s.get("backlog")
    if bl:
        small = bl["small_queue"]["claim_ms"]
        empty_rate = tp["tenure_n"]["jobs_per_second"] if tp else None
        for level in bl["levels"]:
            n = f"{level['pending']:,} pending"
            r = row(
                "backlog",
                f"claim time, {n}",
                level["claim_ms"],
                "ms",
                f"{bl['small_queue']['pending']} pending",
                small,
                "<= 1.5x",
            )
            r["met"] = at_most(r["ratio"], 1.5)
            rows.append(r)
            r = row(
                "backlog",
                f"throughput, {n}" + (", drained to the end" if level.get("drained_all") else ""),
                level["jobs_per_second"],
                "jobs/s",
                "drain from empty",
                empty_rate,
                ">= 0.8x",
            )
            r["met"] = at_least(r["ratio"], 0.8)
            rows.append(r)
        largest = bl["levels"][-1]
        if tp:
            rows.append(
                row(
                    "cost",
                    f"worker peak RSS, {largest['pending']:,} backlog",
                    largest["peak_rss_mib"],
                    "MiB",
                    "drain from empty",
                    tp["tenure_n"]["peak_rss_mib"],
                    "flat",
                )
            )
        held = bl["snapshot_held"]
        n = f"{held['pending']:,} pending, snapshot held {held['snapshot_held_seconds']}s"
        rows.append(
            row(
                "backlog",
                f"throughput, {n}",
                held["jobs_per_second"],
                "jobs/s",
                "drain from empty",
                empty_rate,
            )
        )
        rows.append(
            row(
                "backlog",
                f"claim time after, {n}",
                held["claim_ms_after"],
                "ms",
                f"{bl['small_queue']['pending']} pending",
                small,
            )
        )
    rec = s.get("recovery")
    if rec:
        rows.append(
            row(
                "recovery",
                f"{rec['expired_leases']:,} expired leases",
                rec["tenure_seconds"],
                "s",
                "one bare UPDATE",
                rec["raw_update_seconds"],
            )
        )
    sch = s.get("scheduled")
    if sch:
        r = row(
            "scheduled",
            f"claim time, {sch['not_yet_due']:,} not yet due",
            sch["claim_ms_with_not_yet_due"],
            "ms",
            f"{sch['due']} due jobs only",
            sch["claim_ms_due_only"],
            "<= 1.2x",
        )
        r["met"] = at_most(r["ratio"], 1.2)
        rows.append(r)
    fair = s.get("fairness")
    if fair:
        hours = fair["simulated_seconds"] / 3600
        r = row(
            "fairness",
            f"WAL per waiting job, {fair['waiting_jobs']:,} waiting {hours:g} h",
            fair["wal_bytes_per_waiting_job"],
            "bytes",
            "priority aging, as reviewed (443 B per 60 s)",
            fair["aging_bytes_per_waiting_job_per_hour"] * hours,
            "< 1 B (nothing per job)",
        )
        r["met"] = fair["wal_bytes_per_waiting_job"] < 1
        rows.append(r)
        rows.append(
            row(
                "fairness",
                f"claim time with the oldest-first share, {fair['waiting_jobs']:,} waiting",
                fair["claim_ms_with_oldest_share"],
                "ms",
                "by priority only",
                fair["claim_ms_by_priority_only"],
            )
        )
    uq = s.get("unique")
    if uq:
        for name, label in (
            ("unique_new", "unique key, each new"),
            ("unique_held", "unique key held: the holder returned"),
            ("idempotency_key", "the caller's idempotency key"),
        ):
            r = row(
                "unique",
                f"single enqueue, {label}",
                uq[f"{name}_per_second"],
                "jobs/s",
                "plain enqueue",
                uq["plain_per_second"],
                ">= 0.8x" if name != "unique_held" else "",
            )
            if name != "unique_held":
                r["met"] = at_least(r["ratio"], 0.8)
            rows.append(r)
    lim = s.get("limits")
    if lim:
        for name, label in (
            ("limit_not_binding", "claim+complete, a queue limit that never binds"),
            ("per_key_1000", f"claim+complete, one running per key over {lim['keys']:,} keys"),
        ):
            r = row(
                "limits",
                label,
                lim[f"{name}_jobs_per_second"],
                "jobs/s",
                "the unlimited claim",
                lim["unlimited_jobs_per_second"],
                ">= 0.8x",
            )
            r["met"] = at_least(r["ratio"], 0.8)
            rows.append(r)
    cp = s.get("copy")
    if cp:
        r = row(
            "copy",
            f"bulk enqueue, {cp['jobs']:,} jobs",
            cp["tenure_jobs_per_second"],
            "jobs/s",
            "bare COPY",
            cp["raw_copy_jobs_per_second"],
            ">= 100k/s",
        )
        r["met"] = cp["tenure_jobs_per_second"] >= 100_000
        rows.append(r)
    return rows


def print_table(result: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal:
        console = Console(width=180)  # a log file keeps whole rows
    meta = result["meta"]
    settings = meta["server_settings"]
    console.print(
        f"Tenure bench ({meta['size']}): {meta['processes']} processes"
        f" x {meta['concurrency_per_process']} slots, "
        f"claim batch {meta['claim_batch']}; PostgreSQL {settings.get('server_version')}, "
        f"fsync={settings.get('fsync')}, synchronous_commit={settings.get('synchronous_commit')}, "
        f"load average at start {meta['machine']['load_avg']}"
    )
    table = Table()
    for col in ("section", "figure", "value", "unit", "baseline", "ratio", "target", "met"):
        table.add_column(col, justify="right" if col in ("value", "ratio") else "left")
    for r in result["rows"]:
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        table.add_row(
            r["section"],
            escape(r["figure"]),
            fmt(r["value"]),
            r["unit"],
            escape(f"{r['baseline']} ({fmt(r['baseline_value'])})"),
            fmt(r["ratio"]),
            r["target"],
            met,
        )
    console.print(table)
    print_targets(result["targets"], console)
    skipped = {k: v["skipped"] for k, v in result["sections"].get("peers", {}).items() if "skipped" in v}
    for name, why in skipped.items():
        console.print(f"peer {name} skipped: {why}", markup=False)


def chart(result: dict[str, Any], path: Path) -> str:
    """Throughput and idle latency of every contender, side by side. Returns the file or why not."""
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return "skipped: matplotlib not installed (pip install 'tenure[bench]')"
    s = result["sections"]
    names, rates, p50s, p99s = [], [], [], []
    tp = s.get("throughput", {})
    for label, key in (("tenure", "tenure_n"), ("raw SQL", "raw_n")):
        if key in tp:
            names.append(label)
            rates.append(tp[key]["jobs_per_second"])
    lat_names: list[str] = []
    if "latency" in s:
        lat_names.append("tenure")
        p50s.append(s["latency"]["idle"]["p50_ms"] or 0)
        p99s.append(s["latency"]["idle"]["p99_ms"] or 0)
    for name, peer in s.get("peers", {}).items():
        if "jobs_per_second" in peer:
            names.append(name)
            rates.append(peer["jobs_per_second"])
        if "idle_latency" in peer:
            lat_names.append(name)
            p50s.append(peer["idle_latency"]["p50_ms"] or 0)
            p99s.append(peer["idle_latency"]["p99_ms"] or 0)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(names, rates, color="tab:blue")
    left.set_title(f"no-op throughput, {result['meta']['processes']} processes")
    left.set_ylabel("jobs/s")
    xs = range(len(lat_names))
    right.bar([x - 0.2 for x in xs], p50s, width=0.4, label="p50")
    right.bar([x + 0.2 for x in xs], p99s, width=0.4, label="p99")
    right.set_xticks(list(xs), lat_names)
    right.set_title("idle enqueue-to-start latency")
    right.set_ylabel("ms")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
