"""The targets of issue 14, each with its measured value, the baseline from the same run, their
ratio, the threshold, and whether it is met. A target whose inputs were not measured in this
run (its section not selected, a peer not installed, a size the run does not reach) is "not
measured", which is not met."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenure.lab.bench.rows import (
    Rule,
    fmt,
    ratio,
    ratio_at_least,
    ratio_at_most,
    ratio_below,
    value_at_least,
    value_at_most,
)

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"
#: The backlog and not-yet-due targets are stated at this many jobs.
MILLION = 1_000_000

Target = dict[str, Any]


def _target(
    name: str,
    threshold: str,
    value: float | None,
    unit: str,
    baseline: str,
    baseline_value: float | None,
    rule: Rule | None,
    note: str = "",
) -> Target:
    """`rule` decides met; None as value means not measured (with `note`)."""
    against = ratio(value, baseline_value)
    status = NOT_MEASURED
    if value is not None and rule is not None:
        status = MET if rule(value, against) else NOT_MET
    return {
        "target": name,
        "threshold": threshold,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_value": baseline_value,
        "ratio": against,
        "status": status,
        "note": note,
    }


def _stated_at_a_million(target: Target, jobs: int, measured_at: str) -> Target:
    """A target stated at a million jobs is judged only at that many: below, its figure stands
    with the size it was taken at, and it is not measured."""
    if jobs >= MILLION:
        return target
    return target | {"status": NOT_MEASURED, "note": f"{measured_at} (--full runs 1M)"}


def _why_missing(sections: dict[str, Any], *names: str) -> str:
    missing = [n for n in names if n not in sections]
    return f"section {', '.join(missing)} not run" if missing else ""


def _drain_targets(s: dict[str, Any]) -> list[Target]:
    tp = s.get("throughput")
    if not tp:
        return [
            _target(
                "drain throughput vs the ceiling (best raw-SQL claim size)",
                ">= 0.6x",
                None,
                "jobs/s",
                "the ceiling",
                None,
                None,
                _why_missing(s, "throughput"),
            )
        ]
    found = []
    for size, at in tp["by_size"].items():
        ceiling = at["ceiling"]
        found.append(
            _target(
                f"drain throughput vs the ceiling, {int(size):,} jobs",
                ">= 0.6x",
                at["tenure_n"]["jobs_per_second"],
                "jobs/s",
                f"raw SQL claim {ceiling['batch']} (best of {tp['ceiling_batches']})",
                ceiling["jobs_per_second"],
                ratio_at_least(0.6),
            )
        )
    return found


def _peer_targets(s: dict[str, Any]) -> list[Target]:
    tp = s.get("throughput")
    peers = s.get("peers", {})
    found = []
    for name, bound, setting in (
        ("pgqueuer", 2.5, "at its best batch size"),
        ("procrastinate", 20.0, "pool sized for its concurrency"),
    ):
        peer = peers.get(name, {})
        by_size = peer.get("by_size")
        if not tp or not by_size:
            why = peer.get("skipped") or _why_missing(s, "throughput") or "not measured"
            found.append(
                _target(
                    f"drain vs {name} ({setting})", f">= {bound:g}x", None, "jobs/s", name, None, None, why
                )
            )
            continue
        for size, drained in by_size.items():
            best = drained.get("best", drained)
            label = f"{name}, batch {best['batch']}" if "batch" in best else f"{name} ({best['jobs']:,} jobs)"
            found.append(
                _target(
                    f"drain vs {name} ({setting}), {int(size):,} jobs",
                    f">= {bound:g}x",
                    tp["by_size"][size]["tenure_n"]["jobs_per_second"],
                    "jobs/s",
                    label,
                    best["jobs_per_second"],
                    ratio_at_least(bound),
                )
            )
    return found


def _end_to_end_target(s: dict[str, Any]) -> Target:
    e2e = s.get("endtoend")
    name = "end to end (one job per enqueue transaction, workers draining) vs raw SQL"
    if not e2e:
        return _target(name, ">= 0.6x", None, "jobs/s", "raw SQL", None, None, _why_missing(s, "endtoend"))
    return _target(
        name,
        ">= 0.6x",
        e2e["tenure"]["jobs_per_second"],
        "jobs/s",
        f"raw INSERT + raw loop claim {e2e['raw_claim_batch']}",
        e2e["raw"]["jobs_per_second"],
        ratio_at_least(0.6),
    )


def _latency_targets(s: dict[str, Any]) -> list[Target]:
    lat = s.get("latency")
    pgq = s.get("peers", {}).get("pgqueuer", {}).get("idle_latency")
    found = []
    for pct, bound in (("p50", 2.0), ("p99", 5.0)):
        key = f"{pct}_ms"
        value = lat["idle"][key] if lat else None
        found.append(
            _target(
                f"idle enqueue-to-start latency {pct}",
                f"<= {bound:g} ms",
                value,
                "ms",
                "pgqueuer idle",
                pgq.get(key) if pgq else None,
                value_at_most(bound),
                _why_missing(s, "latency"),
            )
        )
    for pct in ("p50", "p99"):
        key = f"{pct}_ms"
        value = lat["idle"][key] if lat else None
        missing = _why_missing(s, "latency") or ("" if pgq else "pgqueuer's idle latency not measured")
        found.append(
            _target(
                f"idle latency {pct} below pgqueuer's",
                "< 1x",
                value if pgq else None,
                "ms",
                "pgqueuer idle",
                pgq.get(key) if pgq else None,
                ratio_below(1) if pgq else None,
                missing,
            )
        )
    return found


def _backlog_target(s: dict[str, Any]) -> Target:
    name = "drain with 1M pending vs an empty queue's"
    bl, tp = s.get("backlog"), s.get("throughput")
    if not bl or not tp:
        why = _why_missing(s, "backlog", "throughput")
        return _target(name, ">= 0.8x", None, "jobs/s", "drain from empty", None, None, why)
    largest = bl["levels"][-1]
    empty = f"drain from empty, {tp['primary_size']:,} jobs", tp["tenure_n"]["jobs_per_second"]
    found = _target(name, ">= 0.8x", largest["jobs_per_second"], "jobs/s", *empty, ratio_at_least(0.8))
    return _stated_at_a_million(found, largest["pending"], f"largest backlog {largest['pending']:,}")


def _not_yet_due_target(s: dict[str, Any]) -> Target:
    name = "claim time with 1M not yet due vs due jobs only"
    sch = s.get("scheduled")
    if not sch:
        return _target(name, "<= 1.2x", None, "ms", "due jobs only", None, None, _why_missing(s, "scheduled"))
    due_only = f"{sch['due']} due jobs only", sch["claim_ms_due_only"]
    found = _target(name, "<= 1.2x", sch["claim_ms_with_not_yet_due"], "ms", *due_only, ratio_at_most(1.2))
    return _stated_at_a_million(found, sch["not_yet_due"], f"{sch['not_yet_due']:,} not yet due")


def _copy_target(s: dict[str, Any]) -> Target:
    cp = s.get("copy")
    name = "COPY enqueue (Client.enqueue_copy)"
    if not cp:
        return _target(
            name, ">= 100k jobs/s", None, "jobs/s", "bare COPY", None, None, _why_missing(s, "copy")
        )
    return _target(
        name + f", {cp['jobs']:,} jobs",
        ">= 100k jobs/s",
        cp["tenure_jobs_per_second"],
        "jobs/s",
        "bare COPY of the same rows",
        cp["raw_copy_jobs_per_second"],
        value_at_least(100_000),
    )


def _cpu_target(s: dict[str, Any]) -> Target:
    name = "worker CPU per job, measured and reported"
    tp = s.get("throughput")
    value = tp["tenure_n"].get("worker_cpu_us_per_job") if tp else None
    note = "profile: python -m tenure.lab.bench.profile; top costs in docs/performance.md"
    return _target(
        name,
        "reported",
        value,
        "us/job",
        "the ceiling's worker",
        tp["raw_n"].get("worker_cpu_us_per_job") if tp else None,
        (lambda _v, _r: True) if value is not None else None,
        note if tp else _why_missing(s, "throughput"),
    )


def targets(result: dict[str, Any]) -> list[Target]:
    s = result["sections"]
    return [
        *_drain_targets(s),
        *_peer_targets(s),
        _end_to_end_target(s),
        *_latency_targets(s),
        _backlog_target(s),
        _not_yet_due_target(s),
        _copy_target(s),
        _cpu_target(s),
    ]


def print_targets(found: list[Target], console: Console) -> None:
    table = Table(title="Targets (issue 14), against baselines measured in this run")
    for col in ("target", "value", "baseline", "ratio", "threshold", "status"):
        table.add_column(col, justify="right" if col in ("value", "ratio") else "left")
    for t in found:
        status = {MET: "[green]met[/green]", NOT_MET: "[red]not met[/red]"}.get(t["status"], t["status"])
        note = f"\n[dim]{escape(t['note'])}[/dim]" if t["note"] else ""
        table.add_row(
            escape(t["target"]) + note,
            f"{fmt(t['value'])} {t['unit']}" if t["value"] is not None else "-",
            escape(f"{t['baseline']} ({fmt(t['baseline_value'])})"),
            fmt(t["ratio"]),
            t["threshold"],
            status,
        )
    console.print(table)
    met = sum(t["status"] == MET for t in found)
    console.print(f"targets met: {met} of {len(found)}")
