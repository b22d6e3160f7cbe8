"""The soak's fault schedule goes on when a fault finds no writable node (every node read-only,
as during a failover): that fault's turn is recorded as skipped with the reason, and the next
fault runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg

from tenure.lab.soak.faults import FaultKind, FaultRecord, FaultSchedule
from tenure.lab.soak.fleet import SoakFleet
from tenure.lab.soak.scope import FaultScope
from tenure.lab.soak.topology import GivenServer


async def test_a_fault_that_finds_no_writable_node_skips_its_turn_and_the_schedule_goes_on(
    dsn: str, tmp_path: Path
) -> None:
    """The database read-only: the row-locks fault is refused, recorded skipped saying so, and
    the schedule runs the snapshot fault after it instead of dying."""
    database = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {database} SET default_transaction_read_only = on")
    fleet = SoakFleet(
        dsn=dsn, schema="tenure", lease=0.1, concurrency=1, run_dir=tmp_path, run_id="t", network=None
    )
    schedule = FaultSchedule(
        fleet=fleet,
        scope=FaultScope(dsn, "tenure", lease=0.05),
        server=GivenServer(dsn, [], tmp_path, "nobody"),
        network=None,
        network_missing="no network namespace in this test",
        started=time.monotonic(),
        only=frozenset({FaultKind.ROW_LOCKS, FaultKind.SNAPSHOT}),
    )
    stop = asyncio.Event()
    seen: list[FaultRecord] = []

    def on_fault(record: FaultRecord) -> None:
        seen.append(record)
        kinds = [r.kind for r in seen]
        if FaultKind.ROW_LOCKS in kinds and FaultKind.SNAPSHOT in kinds[kinds.index(FaultKind.ROW_LOCKS) :]:
            stop.set()

    await asyncio.wait_for(schedule.run(stop, 0.01, on_fault), 30)
    locks = [r for r in seen if r.kind is FaultKind.ROW_LOCKS]
    assert locks and all(r.skipped for r in locks), seen
    assert "no writable node" in locks[0].detail and "read-only" in locks[0].detail, locks[0]
    after = seen[seen.index(locks[0]) :]
    assert any(r.kind is FaultKind.SNAPSHOT and not r.skipped for r in after), seen
