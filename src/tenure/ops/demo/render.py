"""Showing the demo: the fault lines during the run and the report at the end (fits 80 columns)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tenure.ops.demo.faults import FaultEvent
from tenure.ops.demo.report import Report

_SIGNAL_STYLE = {"SIGKILL": "bold red", "SIGSTOP": "bold yellow", "SIGCONT": "bold green"}


def fault_line(event: FaultEvent) -> Text:
    line = Text(f"{event.at:5.1f}s ")
    line.append(f"{event.signal:<7}", style=_SIGNAL_STYLE.get(event.signal, "bold"))
    line.append(f" {event.worker}")
    if event.signal != "SIGCONT":
        line.append(f" holding {event.leases_held} leases")
    line.append(f": {event.note}", style="dim")
    return line


def _codes(counts: dict[str, int]) -> str:
    return ", ".join(f"{code} {n}" for code, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _figures(report: Report) -> Table:
    jobs, leases = report.jobs, report.leases
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim")
    table.add_column(justify="right")
    table.add_column(style="dim")
    table.add_row("transfers enqueued", str(jobs["enqueued"]), "")
    table.add_row("succeeded", str(jobs["succeeded"]), "")
    table.add_row("dead", str(jobs["dead"]), _codes(jobs["dead_by_code"]))
    for state in ("cancelled", "scheduled", "pending", "running"):
        if jobs[state]:
            table.add_row(state, str(jobs[state]), "")
    table.add_row(
        "leases expired",
        str(leases["expired"]),
        f"{leases['expired_to_pending']} back in the queue, {leases['expired_to_dead']} to dead",
    )
    table.add_row(
        "jobs recovered",
        str(leases["jobs_recovered"]),
        f"then {leases['recovered_then_succeeded']} succeeded",
    )
    table.add_row(
        "stale writes fenced off",
        str(leases["stale_writes_rejected"]),
        _codes(leases["stale_writes_by_code"]),
    )
    retries = leases["retries_by_code"]
    table.add_row("retries", str(sum(retries.values())), _codes(retries))
    return table


def _workers(report: Report) -> Table:
    table = Table(box=None, pad_edge=False, header_style="dim")
    for column in ("worker", "signals", "claimed", "succeeded", "lost", "fenced"):
        table.add_column(column, justify="left" if column in ("worker", "signals") else "right")
    for w in report.workers:
        stats = w["stats"]
        keys = ("claimed", "succeeded", "leases_lost", "fencing_losses")
        cells = ["-"] * len(keys) if stats is None else [str(stats.get(k, "-")) for k in keys]
        signals = " ".join(s for s in w["signals"] if s != "started") or "-"
        table.add_row(f"{w['name']} ({w['pid']})", signals, *cells)
    return table


def _invariants(report: Report) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column()
    table.add_column()
    table.add_column(style="dim")
    for inv in report.invariants:
        mark = Text("✓", style="bold green") if inv.ok else Text("✗", style="bold red")
        table.add_row(mark, inv.name, inv.detail)
    return table


def render_report(console: Console, report: Report) -> None:
    verdict = (
        Text(" all invariants hold ", style="bold green")
        if report.ok
        else Text(" INVARIANT VIOLATED ", style="bold red")
    )
    verdict.append(f"· {report.wall_seconds:.1f}s ", style="dim")
    body = Group(
        _figures(report),
        Text(),
        _workers(report),
        Text(),
        Text("invariants, checked in the database", style="bold"),
        _invariants(report),
    )
    console.print(Panel(body, title="tenure demo", subtitle=verdict, expand=False))
