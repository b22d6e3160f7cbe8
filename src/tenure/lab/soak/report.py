"""The soak's verdict: figures read back from the database, and the checks that must all hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenure.lab.soak.attempts import Overlaps
from tenure.ops.demo.report import Invariant as Check

__all__ = ["Check", "SoakReport"]


@dataclass
class SoakReport:
    jobs: dict[str, Any]
    leases: dict[str, Any]
    money: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    window: dict[str, Any] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    fault_counts: dict[str, int] = field(default_factory=dict)
    workers: list[dict[str, Any]] = field(default_factory=list)
    setup: dict[str, Any] = field(default_factory=dict)
    #: Per server fault: seconds to the first completion after it, and the longest gap.
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    #: What the faults at Tenure's guarded edges did: the upgrade, the holds of pending rows, the
    #: rows injected, the forged requests, the thread handlers' connections killed.
    edges: dict[str, Any] = field(default_factory=dict)
    #: The replication state each enqueue was acknowledged under (tenure.lab.soak.acknowledgements),
    #: the enqueues PostgreSQL said may not be replicated, and what missing jobs were told.
    replication: dict[str, Any] = field(default_factory=dict)
    #: Vacuums of `jobs` over the run: by the workers themselves and by autovacuum.
    vacuums: dict[str, Any] = field(default_factory=dict)
    #: The servers' own logs kept for this run (a cluster's event log, each node's log).
    evidence: list[str] = field(default_factory=list)
    #: Where the run's logs stay on disk when a check failed.
    logs_kept_at: str | None = None
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and all(c.ok for c in self.checks)

    def add_window(self, found: Overlaps, lease: float, longest_network_fault: float) -> None:
        """Two attempts of one job may overlap, but only for a bounded time.

        A worker that is running learns of its lost lease from its own monotonic clock and stops
        at the handler's next cancellation point, so its overlap stays within one lease. A worker
        cut off from the database may sit blocked in a database call until the network heals,
        so the bound allows the longest network fault twice over (TCP retransmission backs off).
        """
        bound = lease + 2 * longest_network_fault
        self.window = {**found.as_dict(), "lease_s": lease, "bound_s": round(bound, 3)}
        self.checks.append(
            Check(
                "duplicate-execution window bounded",
                found.max_window <= bound,
                f"max {found.max_window:.2f}s over {found.jobs_run_twice_at_once} jobs, lease "
                f"{lease:g}s, bound {bound:.2f}s",
            )
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "wall_seconds": round(self.wall_seconds, 1),
            "setup": self.setup,
            "jobs": self.jobs,
            "leases": self.leases,
            "money": self.money,
            "duplicate_execution": self.window,
            "fault_counts": self.fault_counts,
            "faults": self.faults,
            "recoveries": self.recoveries,
            "edges": self.edges,
            "replication": self.replication,
            "vacuums": self.vacuums,
            "evidence": self.evidence,
            "logs_kept_at": self.logs_kept_at,
            "workers": self.workers,
            "checks": [c.as_dict() for c in self.checks],
            "failures": self.failures,
        }


def render(report: SoakReport) -> None:
    jobs, leases, money, window = report.jobs, report.leases, report.money, report.window
    kinds = ", ".join(f"{k.split('.')[-1]} {n}" for k, n in jobs["enqueued_by_kind"].items())
    lines = [
        "",
        f"tenure soak ({report.setup.get('topology', 'direct')}): "
        f"{'ALL CHECKS HOLD' if report.ok else 'VIOLATION'} after {report.wall_seconds:.0f}s",
        f"  jobs enqueued            {jobs['enqueued']:>8}   ({kinds})",
        f"  succeeded                {jobs['succeeded']:>8}",
        f"  dead                     {jobs['dead']:>8}   (doomed by design, or transfers lacking funds)",
        f"  acknowledged, missing    {jobs['missing_acknowledged']:>8}",
        f"  unfinished               {jobs['unfinished']:>8}",
        f"  transfers applied twice  {money['applied_more_than_once']:>8}   "
        f"(of {money['transfers_succeeded']} succeeded)",
        f"  stale writes rejected    {leases['stale_writes_rejected']:>8}",
        f"  lease expirations        {leases['lease_expirations']:>8}",
        f"  retries                  {leases['retries']:>8}",
        f"  recovered after stop     {leases['recovered_after_stop']:>8}",
        f"  max duplicate execution  {window.get('max_window_s', 0):>7.2f}s   "
        f"(lease {window.get('lease_s')}s, bound {window.get('bound_s')}s, "
        f"{window.get('jobs_run_twice_at_once', 0)} jobs ran twice at once)",
        f"  money                    {money['now']:>8}   (opening {money['opening']})",
        f"  vacuums of jobs          {report.vacuums.get('by_workers', 0):>8}   by the workers "
        f"({report.vacuums.get('by_autovacuum', 0)} by autovacuum)",
        "  faults: " + ", ".join(f"{k} {n}" for k, n in report.fault_counts.items()),
    ]
    lines += [
        f"  after {r['fault']:<22} first completion {r['first_completion_s']}s "
        f"(longest gap {r['longest_gap_s']}s)"
        for r in report.recoveries
    ]
    lines += _edge_lines(report.edges)
    lines += _replication_lines(report.replication)
    skipped = {f["fault"]: f["detail"] for f in report.faults if f["skipped"]}
    lines += [f"  skipped {k}: {v}" for k, v in skipped.items()]
    lines.append("  checks:")
    lines += [f"    {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in report.checks]
    lines += [f"    FAIL {f}" for f in report.failures]
    if report.logs_kept_at:
        lines.append(f"  logs kept for this failed run: {report.logs_kept_at}")
    print("\n".join(lines), flush=True)


def _replication_lines(replication: dict[str, Any]) -> list[str]:
    if not replication:
        return []
    states = ", ".join(f"{k} {n}" for k, n in sorted(replication["acknowledged_while"].items()))
    lines = [
        f"  acknowledged while       {states or 'nothing acknowledged'}",
        f"  not replicated (apart)   {replication['not_replicated_enqueues']:>8}   "
        f"({replication['not_replicated_jobs_stored']} of their jobs stored)",
    ]
    for m in replication["missing_acknowledged_while"]:
        lines.append(
            f"  missing job {m['job']}: acknowledged at {m['at_s']}s while {m['state']} {m['cluster']}"
        )
    return lines


def _edge_lines(edges: dict[str, Any]) -> list[str]:
    lines = []
    upgrade = edges.get("upgrade") or {}
    if "applied" in upgrade:
        lines.append(
            f"  upgrade                  version {upgrade['from']} -> {upgrade['to']} under load in "
            f"{upgrade['seconds']}s, applied {upgrade['applied']}"
        )
    for hold in edges.get("pending_lock_holds", []):
        lines.append(
            f"  pending rows held {hold['seconds']:>5}s  completed meanwhile: {hold['completed_limited']} "
            f"limited, {hold['completed_elsewhere']} elsewhere ({hold['completed_ordered']} ordered)"
        )
    injected = edges.get("injected_rows") or {}
    if injected:
        lines.append("  injected rows            " + ", ".join(f"{k} {len(v)}" for k, v in injected.items()))
    return lines
