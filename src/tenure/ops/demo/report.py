"""The demo's verdict: what happened, read back from the database, and the invariants checked."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection, IsolationLevel

from tenure.ops.demo.bank import TRANSFER
from tenure.ops.demo.queries import BankQueries


@dataclass(frozen=True)
class Invariant:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Report:
    setup: dict[str, Any]
    jobs: dict[str, Any]
    leases: dict[str, Any]
    invariants: list[Invariant]
    faults: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "wall_seconds": round(self.wall_seconds, 2),
            "setup": self.setup,
            "faults": self.faults,
            "jobs": self.jobs,
            "leases": self.leases,
            "workers": self.workers,
            "invariants": [i.as_dict() for i in self.invariants],
        }


async def read_report(
    conn: AsyncConnection[Any], bank: BankQueries, *, enqueued: int, total_money: int
) -> Report:
    """Reads every figure from one snapshot, so the counts and the invariants agree."""
    await conn.set_isolation_level(IsolationLevel.REPEATABLE_READ)
    async with conn.transaction():
        states = await bank.job_states(conn, TRANSFER)
        dead_codes = await bank.dead_codes(conn, TRANSFER)
        events = await bank.events(conn)
        recovered = await bank.recovered_outcomes(conn, TRANSFER)
        invariants = await _invariants(conn, bank, enqueued=enqueued, total_money=total_money)
    jobs = {
        "enqueued": enqueued,
        "succeeded": states.get("succeeded", 0),
        "dead": states.get("dead", 0),
        "cancelled": states.get("cancelled", 0),
        "scheduled": states.get("scheduled", 0),
        "pending": states.get("pending", 0),
        "running": states.get("running", 0),
        "dead_by_code": dead_codes,
    }
    return Report(setup={}, jobs=jobs, leases=_lease_figures(events, recovered), invariants=invariants)


def _lease_figures(events: list[dict[str, Any]], recovered: dict[str, int]) -> dict[str, Any]:
    def by(event: str, key: str) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for e in events:
            if e["event"] == event:
                counts[e[key] or "?"] += e["n"]
        return dict(counts)

    expired = by("lease_expired", "to_state")
    fenced = by("fencing_lost", "error_code")
    return {
        "expired": sum(expired.values()),
        # Back in the queue: scheduled while the backoff runs, pending when there was none.
        "expired_to_pending": expired.get("pending", 0) + expired.get("scheduled", 0),
        "expired_to_dead": expired.get("dead", 0),
        "jobs_recovered": sum(recovered.values()),
        "recovered_then_succeeded": recovered.get("succeeded", 0),
        "stale_writes_rejected": sum(fenced.values()),
        "stale_writes_by_code": fenced,
        "retries_by_code": by("retry", "error_code"),
        "released_at_shutdown": sum(by("released", "error_code").values()),
    }


async def _invariants(
    conn: AsyncConnection[Any], bank: BankQueries, *, enqueued: int, total_money: int
) -> list[Invariant]:
    held = await read_bank(conn, bank, TRANSFER)
    jobs = await bank.invariant(conn, "jobs_accounted", TRANSFER)
    return [
        *held.invariants(total_money),
        Invariant(
            "no job lost",
            jobs["total"] == enqueued and jobs["terminal"] == enqueued and jobs["unfinished"] == 0,
            f"{jobs['terminal']}/{enqueued} finished, {jobs['unfinished']} open"
            + ("" if jobs["total"] == enqueued else f", {jobs['total']} stored"),
        ),
    ]


@dataclass(frozen=True)
class BankFigures:
    """What the bank's invariants are judged by, each the row of its invariant query. The demo
    and the soak judge their banks by the same invariants."""

    money: dict[str, Any]
    overdraft: dict[str, Any]
    ledger: dict[str, Any]
    once: dict[str, Any]
    stray: dict[str, Any]

    def invariants(self, total_money: int) -> list[Invariant]:
        """The money is all there and no account overdrawn; the balances agree with the ledger,
        which holds each succeeded transfer once, under its completing token, and nothing else."""
        money, overdraft, ledger, once, stray = self.money, self.overdraft, self.ledger, self.once, self.stray
        return [
            Invariant(
                "total money unchanged",
                money["expected"] == money["actual"] == total_money,
                f"{money['actual']} now, {total_money} at opening",
            ),
            Invariant("no account overdrawn", overdraft["violations"] == 0, f"lowest {overdraft['lowest']}"),
            Invariant(
                "balances match the ledger",
                ledger["violations"] == 0,
                f"{ledger['violations']} accounts differ",
            ),
            Invariant(
                "each succeeded transfer applied exactly once",
                once["not_once"] == 0,
                f"{once['succeeded'] - once['not_once']}/{once['succeeded']}, {once['duplicated']} doubled",
            ),
            Invariant(
                "ledger rows carry the completing token",
                once["wrong_token"] == 0,
                f"{once['wrong_token']} stale tokens",
            ),
            Invariant(
                "jobs that did not succeed wrote nothing",
                stray["violations"] == 0,
                f"{stray['violations']} stray rows",
            ),
        ]


async def read_bank(conn: AsyncConnection[Any], bank: BankQueries, task: str) -> BankFigures:
    """The bank's figures, its transfers being the jobs of `task`."""
    return BankFigures(
        money=await bank.invariant(conn, "money"),
        overdraft=await bank.invariant(conn, "no_overdraft"),
        ledger=await bank.invariant(conn, "balances_match_ledger"),
        once=await bank.invariant(conn, "applied_once", task),
        stray=await bank.invariant(conn, "no_stray_ledger"),
    )
