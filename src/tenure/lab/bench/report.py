"""The result as figures with their baselines: a table on the terminal, rows in the JSON, a chart."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenure.lab.bench.rows import (
    Row,
    fmt,
    ratio_above,
    ratio_at_least,
    ratio_at_most,
    ratio_below,
    row,
    value_at_least,
    value_below,
)
from tenure.lab.bench.targets import FLOOR
from tenure.lab.bench.throughput_rows import contention_rows, cost_rows, peer_rows, throughput_rows
from tenure.lab.bench.verdicts import print_targets

#: Where the machine's CPU goes per job end to end, in the order a job meets it.
END_TO_END_CPU = (
    ("producer_cpu_us_per_job", "producers' CPU"),
    ("producer_server_cpu_us_per_job", "server CPU for the producers (their backends)"),
    ("worker_cpu_us_per_job", "workers' CPU"),
    ("worker_server_cpu_us_per_job", "server CPU for the workers (their backends)"),
)
PERCENTILES = ("p50_ms", "p99_ms")
#: How far above the machine's floor Tenure's idle latency may be, at each percentile.
FLOOR_BOUNDS = (1.25, 2.0)

Sections = dict[str, Any]


def figure_rows(result: dict[str, Any]) -> list[Row]:
    s = result["sections"]
    tp = s.get("throughput")
    rows = throughput_rows(tp) if tp else []
    rows += peer_rows(tp, s.get("peers", {}))
    if tp:
        rows += cost_rows(tp)
    for name, rows_of in SECTION_ROWS:
        if s.get(name):
            rows += rows_of(s)
    return rows


def end_to_end_rows(s: Sections) -> list[Row]:
    """The end-to-end rates and, per job, the CPU each side spent: Tenure against raw SQL and
    against PgQueuer, and PgQueuer against raw SQL, where it ran."""
    e2e = s["endtoend"]
    tenure, raw = e2e["tenure"], e2e["raw"]
    baseline = f"raw SQL (claim {e2e['raw_claim_batch']})"
    rate = tenure["jobs_per_second"]
    rows = [
        row("endtoend", "end to end, tenure", rate, "jobs/s", baseline, raw["jobs_per_second"],
            ">= 0.6x", ratio_at_least(0.6)),
    ]  # fmt: skip
    pgq = e2e.get("pgqueuer", {})
    if "jobs_per_second" in pgq:
        peer = f"pgqueuer (batch {e2e['pgqueuer_batch']})"
        rows += [
            row("endtoend", "end to end, tenure", rate, "jobs/s", peer, pgq["jobs_per_second"],
                "> 1x", ratio_above(1)),
            row("endtoend", "end to end, pgqueuer", pgq["jobs_per_second"], "jobs/s", baseline,
                raw["jobs_per_second"]),
        ]  # fmt: skip
    for name, measured in (("tenure", tenure), ("pgqueuer", pgq)):
        if "jobs_per_second" not in measured:
            continue
        rows.append(
            row("endtoend", f"producers' enqueue rate, {name}", measured["enqueue_jobs_per_second"],
                "jobs/s", baseline, raw["enqueue_jobs_per_second"])
        )  # fmt: skip
        for key, label in END_TO_END_CPU:
            rows.append(
                row("endtoend", f"{label} per job, {name}", measured.get(key), "us", baseline, raw.get(key))
            )
    return rows


def _latency_rows(s: Sections) -> list[Row]:
    """Idle latency against the machine's floor and PgQueuer's, each peer's against Tenure's, and
    Tenure's at half load."""
    idle, floor = s["latency"]["idle"], s["latency"]["floor"]
    peers = s.get("peers", {})
    pgq = peers.get("pgqueuer", {}).get("idle_latency", {})
    below_pgq = "< 1x pgqueuer", ratio_below(1)
    rows = [
        row("latency", f"idle {pct[:3]}, tenure", idle[pct], "ms", "floor: durable INSERT + NOTIFY + "
            "durable claim", floor[pct], f"<= {bound:g}x floor", ratio_at_most(bound))
        for pct, bound in zip(PERCENTILES, FLOOR_BOUNDS, strict=True)
    ]  # fmt: skip
    rows += [
        row("latency", f"idle {pct[:3]}, tenure", idle[pct], "ms", "pgqueuer idle", pgq.get(pct), *below_pgq)
        for pct in PERCENTILES
    ]
    for name in ("pgqueuer", "procrastinate"):
        peer = peers.get(name, {}).get("idle_latency")
        if peer:
            rows += [
                row("latency", f"idle {pct[:3]}, {name}", peer[pct], "ms", "tenure idle", idle[pct])
                for pct in PERCENTILES
            ]
    loaded = s["latency"]["half_load"]
    rows += [
        row("latency", f"half load {pct[:3]}, tenure", loaded[pct], "ms", "tenure idle", idle[pct])
        for pct in PERCENTILES
    ]
    return rows


def _waits_rows(s: Sections) -> list[Row]:
    """A wait's cost to its job: signal to handler resumed past its wait, and to the handler's
    start, against the machine's floor of the same section (and Tenure's idle enqueue-to-start,
    where the latency section ran). Then what jobs waiting for signals cost the claim and the
    promotion pass's deadline statement."""
    w = s["waits"]
    floor, idle = w["floor"], s.get("latency", {}).get("idle")
    rows = []
    for pct in PERCENTILES:
        at = pct[:3]
        resumed, started = w["signal_to_resumed"][pct], w["signal_to_handler_start"][pct]
        rows += [
            row("latency", f"signal to handler resumed {at}, tenure", resumed, "ms", f"floor: {FLOOR}",
                floor[pct], "reported"),
            row("latency", f"signal to handler start {at}, tenure", started, "ms", f"floor: {FLOOR}",
                floor[pct], "reported"),
        ]  # fmt: skip
        if idle:
            figure = f"signal to handler resumed {at}, tenure"
            rows.append(row("latency", figure, resumed, "ms", "tenure idle", idle[pct], "reported"))
    waiting = f"{w['waiting']:,} waiting for signals"
    pending_only = f"{w['pending']} pending only", w["claim_ms_pending_only"]
    return [
        *rows,
        row("waits", f"claim time, {waiting}", w["claim_ms_with_waiting"], "ms", *pending_only, "<= 1.2x",
            ratio_at_most(1.2)),
        row("waits", f"deadline pass, none due, {waiting}", w["deadline_pass_ms_with_waiting"], "ms",
            "none waiting", w["deadline_pass_ms_none_waiting"], "reported"),
        row("waits", f"deadline pass, none due: rows read of jobs and job_waits, {waiting}",
            w["deadline_pass_rows_read"], "rows", "jobs waiting", w["waiting"], "index probes only"),
    ]  # fmt: skip


def _backlog_rows(s: Sections) -> list[Row]:
    """At each backlog: the claim time against a small queue's, the drain against one from empty;
    the largest backlog's worker memory; then the same with a snapshot held."""
    bl, tp = s["backlog"], s.get("throughput")
    small = f"{bl['small_queue']['pending']} pending", bl["small_queue"]["claim_ms"]
    empty = "drain from empty", tp["tenure_n"]["jobs_per_second"] if tp else None
    rows = []
    for level in bl["levels"]:
        n = f"{level['pending']:,} pending"
        rows.append(
            row("backlog", f"claim time, {n}", level["claim_ms"], "ms", *small, "<= 1.5x", ratio_at_most(1.5))
        )
        if level.get("drained_all"):
            n += ", drained to the end"
        rate = level["jobs_per_second"]
        rows.append(
            row("backlog", f"throughput, {n}", rate, "jobs/s", *empty, ">= 0.8x", ratio_at_least(0.8))
        )
    largest = bl["levels"][-1]
    if tp:
        figure = f"worker peak RSS, {largest['pending']:,} backlog"
        from_empty = tp["tenure_n"]["peak_rss_mib"]
        rows.append(
            row("cost", figure, largest["peak_rss_mib"], "MiB", "drain from empty", from_empty, "flat")
        )
    held = bl["snapshot_held"]
    n = f"{held['pending']:,} pending, snapshot held {held['snapshot_held_seconds']}s"
    rows.append(row("backlog", f"throughput, {n}", held["jobs_per_second"], "jobs/s", *empty))
    rows.append(row("backlog", f"claim time after, {n}", held["claim_ms_after"], "ms", *small))
    return rows


def _recovery_rows(s: Sections) -> list[Row]:
    rec = s["recovery"]
    figure = f"{rec['expired_leases']:,} expired leases"
    return [row("recovery", figure, rec["tenure_seconds"], "s", "one bare UPDATE", rec["raw_update_seconds"])]


def _scheduled_rows(s: Sections) -> list[Row]:
    sch = s["scheduled"]
    figure = f"claim time, {sch['not_yet_due']:,} not yet due"
    due_only = f"{sch['due']} due jobs only", sch["claim_ms_due_only"]
    claim = sch["claim_ms_with_not_yet_due"]
    return [row("scheduled", figure, claim, "ms", *due_only, "<= 1.2x", ratio_at_most(1.2))]


def _fairness_rows(s: Sections) -> list[Row]:
    """What waiting writes, against priority aging as reviewed; the claim with its oldest-first
    share against one by priority alone."""
    fair = s["fairness"]
    hours = fair["simulated_seconds"] / 3600
    waiting = f"{fair['waiting_jobs']:,} waiting"
    aging = (
        "priority aging, as reviewed (443 B per 60 s)",
        fair["aging_bytes_per_waiting_job_per_hour"] * hours,
    )
    wal = fair["wal_bytes_per_waiting_job"]
    figure = f"WAL per waiting job, {waiting} {hours:g} h"
    by_priority = "by priority only", fair["claim_ms_by_priority_only"]
    claim = fair["claim_ms_with_oldest_share"]
    return [
        row("fairness", figure, wal, "bytes", *aging, "< 1 B (nothing per job)", value_below(1)),
        row("fairness", f"claim time with the oldest-first share, {waiting}", claim, "ms", *by_priority),
    ]


def _unique_rows(s: Sections) -> list[Row]:
    """Each keyed single enqueue against a plain one; a held key only returns its holder."""
    uq = s["unique"]
    plain = "plain enqueue", uq["plain_per_second"]
    kinds = (
        ("unique_new", "unique key, each new", ">= 0.8x", ratio_at_least(0.8)),
        ("unique_held", "unique key held: the holder returned", "", None),
        ("idempotency_key", "the caller's idempotency key", ">= 0.8x", ratio_at_least(0.8)),
    )
    return [
        row("unique", f"single enqueue, {label}", uq[f"{name}_per_second"], "jobs/s", *plain, target, rule)
        for name, label, target, rule in kinds
    ]


def _limits_rows(s: Sections) -> list[Row]:
    lim = s["limits"]
    unlimited = "the unlimited claim", lim["unlimited_jobs_per_second"]
    kinds = (
        ("limit_not_binding", "claim+complete, a queue limit that never binds"),
        ("per_key_1000", f"claim+complete, one running per key over {lim['keys']:,} keys"),
    )
    target = ">= 0.8x", ratio_at_least(0.8)
    return [
        row("limits", label, lim[f"{name}_jobs_per_second"], "jobs/s", *unlimited, *target)
        for name, label in kinds
    ]


def _copy_rows(s: Sections) -> list[Row]:
    cp = s["copy"]
    figure = f"bulk enqueue, {cp['jobs']:,} jobs"
    bare = "bare COPY", cp["raw_copy_jobs_per_second"]
    rate = cp["tenure_jobs_per_second"]
    return [row("copy", figure, rate, "jobs/s", *bare, ">= 100k/s", value_at_least(100_000))]


def _workflow_rows(s: Sections) -> list[Row]:
    wf = s["workflows"]
    plain = "plain jobs, same loop", wf["plain_jobs_per_second"]
    chains = f"claim+complete, steps of chains of {wf['chain_length']}"
    parents = f"claim+complete, the {wf['fan_in']:,} parents of one fan-in"
    enqueue = f"enqueue a fan-in of {wf['fan_in']:,} (one statement)"
    release = "the completion batch that released the fan-in"
    median = "median batch", wf["median_completion_ms"]
    plain_enqueue = "as many plain jobs, 100 a statement", wf["plain_enqueue_seconds_for_fan_in"]
    end_to_end = f"enqueue and drain, per step of chains of {wf['chain_length']}"
    plain_e2e = "plain jobs, enqueued 100 a statement", wf["plain_us_per_job_end_to_end"]
    bound = "the worker's statement bound, ms", wf["statement_bound_seconds"] * 1000
    return [
        row("workflows", chains, wf["chain_steps_per_second"], "steps/s", *plain, "reported"),
        row("workflows", end_to_end, wf["chain_us_per_step_end_to_end"], "us", *plain_e2e, "reported"),
        row("workflows", parents, wf["fan_in_parents_per_second"], "steps/s", *plain, "reported"),
        row("workflows", enqueue, wf["fan_in_enqueue_seconds"], "s", *plain_enqueue, "reported"),
        row("workflows", release, wf["fan_in_release_ms"], "ms", *median, "reported"),
        row(
            "workflows",
            "the pass's chunk that gathered the fan-in's input",
            wf["fan_in_input_gathered_ms"],
            "ms",
            *median,
            "reported",
        ),
        row(
            "workflows",
            f"a fan-out of {wf['fan_out']:,}: the root's completion",
            wf["fan_out_root_completion_ms"],
            "ms",
            *median,
            "reported",
        ),
        row(
            "workflows",
            f"the longest of its {wf['fan_out_chunks']} release chunks",
            wf["fan_out_longest_chunk_ms"],
            "ms",
            *bound,
            "<= 1/10 of the bound",
            ratio_at_most(0.1),
        ),
        row(
            "workflows",
            f"every child released ({wf['fan_out_released']:,})",
            wf["fan_out_release_seconds"],
            "s",
            *bound,
            "reported",
        ),
    ]


#: The sections with figures of their own, in the order of the table, each read when it ran.
SECTION_ROWS: tuple[tuple[str, Callable[[Sections], list[Row]]], ...] = (
    ("contention", contention_rows),
    ("endtoend", end_to_end_rows),
    ("latency", _latency_rows),
    ("waits", _waits_rows),
    ("backlog", _backlog_rows),
    ("recovery", _recovery_rows),
    ("scheduled", _scheduled_rows),
    ("fairness", _fairness_rows),
    ("unique", _unique_rows),
    ("limits", _limits_rows),
    ("copy", _copy_rows),
    ("workflows", _workflow_rows),
)


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
