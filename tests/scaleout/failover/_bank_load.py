"""The demo bank under a failover: real `tenure worker` processes on the cluster's multi-host DSN,
a producer enqueuing through the failover, and the checks read back from the new primary.

Two of the three workers run with their clocks minutes off (libfaketime, as the soak's w2 and
w3), so every lease they hold across the failover is also a proof that leases use database time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from _cluster import FailoverCluster
from psycopg.rows import dict_row

from tenure.lab.soak.fleet import FAKETIME_LIBRARY
from tenure.ops.demo.bank import TRANSFER, app
from tenure.ops.demo.database import prepare, recreate_database
from tenure.ops.demo.fleet import Fleet
from tenure.ops.demo.queries import BankQueries
from tenure.ops.demo.workload import make_workload
from tenure.producer.client import Client

SCHEMA = "tenure"
LEASE = 4.0
ACCOUNTS = 40
BACKLOG = 400
#: The producer's pace through the failover: a batch of this many transfers every PRODUCE_EVERY s.
PRODUCE_BATCH = 4
PRODUCE_EVERY = 0.05
#: Which workers run with a skewed clock, and by how much (libfaketime's FAKETIME syntax).
SKEWED = {"w2": "+7m", "w3": "-5m"}


TESTS_DIR = Path(__file__).resolve().parents[2]
#: The skewed workers run the transfer as a coroutine (tests/apps/failover_bank_async.py says why).
SKEWED_APP = "apps.failover_bank_async"


class SkewedFleet(Fleet):
    """The demo's fleet, with the clocks of SKEWED workers moved by minutes."""

    def environment(self, name: str, owner: str) -> dict[str, str]:
        if name not in SKEWED:
            return {}
        path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
        if not FAKETIME_LIBRARY.exists():
            raise RuntimeError(
                f"libfaketime is missing ({FAKETIME_LIBRARY}): run scripts/install-system-deps.sh"
            )
        # Every clock of the process moves, monotonic ones too (see tenure.lab.soak.fleet).
        return {
            "LD_PRELOAD": str(FAKETIME_LIBRARY),
            "FAKETIME": SKEWED[name],
            "FAKETIME_NO_CACHE": "1",
            "PYTHONPATH": path,
        }


@dataclass
class Producer:
    """Enqueues transfers at a steady pace through whatever the failover does; an enqueue that
    fails is not retried and not counted (whether it committed cannot be known)."""

    client: Client
    acknowledged: list[int] = field(default_factory=list)
    failed: int = 0
    seed: int = 7

    async def run(self, stop: asyncio.Event) -> None:
        workload = make_workload(ACCOUNTS, 100_000, seed=self.seed)
        payloads = iter(workload.transfers)
        while not stop.is_set():
            specs = [self.client.builder.spec(TRANSFER, next(payloads)) for _ in range(PRODUCE_BATCH)]
            try:
                jobs = await self.client.enqueue_many(specs)
            except Exception:
                self.failed += 1
            else:
                self.acknowledged.extend(j.id for j in jobs)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PRODUCE_EVERY)


async def rows(dsn: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def wait_until(probe: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.Error):
            last = await probe()
            if last:
                return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@dataclass
class FailoverRun:
    """What one failover under load left behind, for the test to check and print."""

    kind: str
    acknowledged: list[int]
    failed_enqueues: int
    live_at_failover: list[dict[str, Any]]
    failover_at: datetime
    failover_seconds: float  # how long the switchover command / the promotion took, locally
    completions: list[datetime]
    worker_stats: dict[str, dict[str, Any] | None]
    skewed_leases: list[dict[str, Any]]
    run_dir: Path

    def first_completion_after(self) -> tuple[float, float]:
        """(seconds from the failover to the first completion after it, the longest gap without
        a completion around it): database times. The old primary can still finish a few jobs
        after a switchover begins, so "after it" is after the longest gap that follows."""
        window = [t for t in self.completions if t >= self.failover_at - timedelta(seconds=1)]
        window = [t for t in window if t <= self.failover_at + timedelta(seconds=90)]
        best_gap, resumed = 0.0, self.failover_at
        for before, after in itertools.pairwise(window):
            gap = (after - before).total_seconds()
            if after > self.failover_at and gap > best_gap:
                best_gap, resumed = gap, after
        return (resumed - self.failover_at).total_seconds(), best_gap


async def run_bank_through_failover(
    cluster: FailoverCluster, run_dir: Path, kind: str, failover: Callable[[], None]
) -> FailoverRun:
    """Bank transfers under load; `failover` runs (in a thread) once the workers are busy; the
    producer goes on through it; then the queue drains and the workers stop."""
    server = cluster.dsn("postgres")
    dsn = await recreate_database(server, f"tenure_demo_failover_{kind}")
    await prepare(dsn, SCHEMA, make_workload(ACCOUNTS, BACKLOG, seed=13))
    fleet = SkewedFleet(dsn=dsn, schema=SCHEMA, lease=LEASE, concurrency=4, run_dir=run_dir, run_id=kind)
    stop = asyncio.Event()
    skewed_leases: list[dict[str, Any]] = []
    try:
        fleet.start(1)
        fleet.app_module = SKEWED_APP
        fleet.start(len(SKEWED))
        skewed_owners = [w.owner for w in fleet.workers if w.name in SKEWED]
        async with Client(dsn, schema=SCHEMA, registry=app.registry) as client:
            producer = Producer(client)
            producing = asyncio.create_task(producer.run(stop))

            async def busy() -> bool:
                [row] = await rows(dsn, f"SELECT count(*) AS n FROM {SCHEMA}.jobs WHERE state = 'succeeded'")
                return bool(row["n"] >= BACKLOG // 3)

            await wait_until(busy, timeout=60, what="the workers to be busy")

            # The skewed workers' leases, as the database holds them: their length is the
            # lease in database time, whatever those workers' clocks read.
            async def skewed() -> list[dict[str, Any]]:
                return await rows(
                    dsn,
                    f"SELECT lease_owner, extract(epoch FROM lease_expires_at - attempted_at)::float8"
                    f" AS seconds FROM {SCHEMA}.jobs WHERE state = 'running' AND lease_owner = ANY(%s)",
                    (skewed_owners,),
                )

            skewed_leases = await wait_until(skewed, timeout=10, what="a skewed worker to hold a lease")
            # The primary's own clock marks the failover, and the leases live at that instant.
            primary = cluster.primary()
            [mark] = await rows(
                cluster.node_dsn(primary, f"tenure_demo_failover_{kind}"), "SELECT clock_timestamp() AS t"
            )
            live = await rows(
                cluster.node_dsn(primary, f"tenure_demo_failover_{kind}"),
                f"SELECT id, lease_token, lease_owner FROM {SCHEMA}.jobs WHERE state = 'running'",
            )
            started = time.monotonic()
            await asyncio.to_thread(failover)
            failover_seconds = time.monotonic() - started
            await asyncio.sleep(3)  # the producer enqueues on the new primary too
            stop.set()
            await producing

        async def drained() -> bool:
            [row] = await rows(
                dsn,
                f"SELECT count(*) AS n FROM {SCHEMA}.jobs WHERE state IN ('scheduled', 'pending', 'running')",
            )
            return bool(row["n"] == 0)

        await wait_until(drained, timeout=90, what="the queue to drain after the failover")
        fleet.stop(timeout=2 * LEASE + 5)
    finally:
        stop.set()
        fleet.abandon()
    completions = [
        r["finished_at"]
        for r in await rows(
            dsn, f"SELECT finished_at FROM {SCHEMA}.jobs WHERE state = 'succeeded' ORDER BY finished_at"
        )
    ]
    return FailoverRun(
        kind=kind,
        acknowledged=producer.acknowledged,
        failed_enqueues=producer.failed,
        live_at_failover=live,
        failover_at=mark["t"],
        failover_seconds=failover_seconds,
        completions=completions,
        worker_stats={w.name: w.stats() for w in fleet.workers},
        skewed_leases=skewed_leases,
        run_dir=run_dir,
    )


async def check_bank(cluster: FailoverCluster, run: FailoverRun) -> dict[str, Any]:
    """Every check of the demo's report that does not assume a fixed enqueue count, plus: every
    acknowledged job is there and finished, and every lease live at the failover ended under its
    own token or was recovered. Raises AssertionError naming the first that fails."""
    dsn = cluster.dsn(f"tenure_demo_failover_{run.kind}")
    bank = BankQueries(SCHEMA)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        money = await bank.invariant(conn, "money")
        overdraft = await bank.invariant(conn, "no_overdraft")
        ledger = await bank.invariant(conn, "balances_match_ledger")
        once = await bank.invariant(conn, "applied_once", TRANSFER)
        stray = await bank.invariant(conn, "no_stray_ledger")
    assert money["expected"] == money["actual"], f"money changed: {money}"
    assert overdraft["violations"] == 0, overdraft
    assert ledger["violations"] == 0, f"balances differ from the ledger: {ledger}"
    assert once["duplicated"] == 0 and once["not_once"] == 0, f"a transfer applied twice or never: {once}"
    assert once["wrong_token"] == 0, f"ledger rows under a stale token: {once}"
    assert stray["violations"] == 0, f"a job that did not succeed wrote to the ledger: {stray}"

    stored = await rows(
        dsn,
        f"SELECT id, state::text AS state, last_error_code FROM {SCHEMA}.jobs WHERE id = ANY(%s)",
        (run.acknowledged,),
    )
    by_id = {r["id"]: r for r in stored}
    lost = sorted(set(run.acknowledged) - set(by_id))
    assert not lost, f"{len(lost)} acknowledged enqueues are missing after the failover: {lost[:10]}"
    states: dict[str, int] = {}
    for r in await rows(dsn, f"SELECT state::text AS state, count(*) AS n FROM {SCHEMA}.jobs GROUP BY 1"):
        states[r["state"]] = r["n"]
    assert set(states) <= {"succeeded", "dead"}, f"unfinished jobs after the drain: {states}"
    dead = await rows(dsn, f"SELECT DISTINCT last_error_code FROM {SCHEMA}.jobs WHERE state = 'dead'")
    assert {r["last_error_code"] for r in dead} <= {"INSUFFICIENT_FUNDS"}, dead

    # Every lease live at the failover: succeeded under that token, or ended by a write under
    # that token (a retry its holder recorded), or expired and recovered.
    leases = [(r["id"], r["lease_token"]) for r in run.live_at_failover]
    ended = await rows(
        dsn,
        f"""SELECT i.id, i.token,
                   (j.state = 'succeeded' AND j.lease_token = i.token) AS completed,
                   EXISTS (SELECT 1 FROM {SCHEMA}.job_events e WHERE e.job_id = i.id AND e.token = i.token
                           AND e.event IN ('retry', 'dead')) AS failed_by_holder,
                   EXISTS (SELECT 1 FROM {SCHEMA}.job_events e WHERE e.job_id = i.id AND e.token = i.token
                           AND e.event = 'lease_expired') AS recovered
            FROM unnest(%s::bigint[], %s::bigint[]) AS i(id, token)
            JOIN {SCHEMA}.jobs j ON j.id = i.id""",
        ([i for i, _ in leases], [t for _, t in leases]),
    )
    unaccounted = [r for r in ended if not (r["completed"] or r["failed_by_holder"] or r["recovered"])]
    assert len(ended) == len(leases) and not unaccounted, (
        f"leases live at the failover unaccounted: {unaccounted}"
    )
    events = {
        r["event"]: r["n"]
        for r in await rows(dsn, f"SELECT event, count(*) AS n FROM {SCHEMA}.job_events GROUP BY 1")
    }
    return {
        "states": states,
        "acknowledged": len(run.acknowledged),
        "failed_enqueues": run.failed_enqueues,
        "live_at_failover": len(leases),
        "live_completed": sum(r["completed"] for r in ended),
        "live_failed_by_holder": sum(r["failed_by_holder"] and not r["completed"] for r in ended),
        "live_recovered": sum(r["recovered"] and not r["completed"] for r in ended),
        "events": events,
    }
