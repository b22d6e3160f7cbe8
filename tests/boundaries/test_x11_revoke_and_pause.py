"""X11: job control across real worker processes. A revoke ends a running job's lease in
the database, so nothing its holder writes afterwards lands, whether the handler ignores the
signal, never checks, or is frozen (SIGSTOP) mid-transaction; a requeue lets another worker run
it at once; a pause holds every worker off a queue until resumed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import job_events, job_row, rows, wait_for_marker, wait_until

import tenure
from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

CONTROL_APP = "apps.control_app"
RESULTS_TABLE = "CREATE TABLE public.boundary_results (job_id bigint, token bigint, pid integer)"
#: Long enough that no lease runs out during a test: whatever ends a lease here is the revoke.
LEASE = 30.0
HEARTBEAT = 2.0  # --heartbeat-interval: the revoke's bound without notifications


async def revoke_latency(db: psycopg.AsyncConnection[Any], job_id: int) -> float:
    """Seconds, in database time, from the revoke to the holder's lease_lost record of it."""
    [row] = await rows(
        db,
        "SELECT extract(epoch FROM l.at - r.at)::float8 AS seconds FROM tenure.job_events r"
        " JOIN tenure.job_events l ON l.job_id = r.job_id AND l.event = 'lease_lost'"
        " WHERE r.job_id = %s AND r.event = 'revoke'",
        (job_id,),
    )
    return float(row["seconds"])


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "listen"),
    [("control.never_checks", True), ("control.ignores_cancel", True), ("control.never_checks", False)],
    ids=["thread-never-checks", "async-ignores-cancel", "thread-heartbeat-only"],
)
async def test_x11_a_revoked_holder_writes_nothing_however_it_behaves(
    db: psycopg.AsyncConnection[Any],
    queries: Queries,
    spawn_worker: Any,
    marker_dir: Path,
    task: str,
    listen: bool,
) -> None:
    """Revoke a running job whose handler ignores it: the job is cancelled under a new token at
    once; the worker learns of it within one heartbeat (at once by notification); the handler's
    later effect and ctx.atomic writes are refused, leaving no effect row and no result row."""
    await db.execute(RESULTS_TABLE)
    extra = ("--heartbeat-interval", str(HEARTBEAT)) + (() if listen else ("--no-listen",))
    worker = spawn_worker("holder", lease=LEASE, app=CONTROL_APP, extra=extra)
    [job] = await queries.job_insert_many(
        db,
        [
            JobSpec(
                task=task, payload={"marker_dir": str(marker_dir), "seconds": HEARTBEAT + 2}, max_attempts=3
            )
        ],
    )
    await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker,))
    app = tenure.Tenure(worker_dsn(db))
    report = await app.cancel([job.id], reason="runaway", actor="test")
    await app.close()
    assert report.revoked == [job.id]
    after = await job_row(db, job.id)
    assert (after["state"], after["lease_token"], after["lease_owner"]) == ("cancelled", 2, None)

    async def heard() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] == "lease_lost"]

    [lost] = await wait_until(heard, timeout=HEARTBEAT + 5, what="the holder to learn of the revoke")
    assert (lost["token"], lost["worker"], lost["error_code"]) == (1, "holder", "REVOKED")
    latency = await revoke_latency(db, job.id)
    print(f"\n{task} listen={listen}: revoke heard after {latency * 1000:.0f} ms")
    assert latency < (0.5 if listen else HEARTBEAT + 0.5), latency
    if task == "control.ignores_cancel":
        await wait_for_marker(marker_dir, "cancelled-1", timeout=5)  # the worker did cancel it
    await wait_for_marker(marker_dir, "atomic-refused-1", timeout=20, procs=(worker,))
    assert (marker_dir / "effect-refused-1").exists()
    assert not (marker_dir / "effect-written-1").exists()
    assert await rows(db, "SELECT * FROM public.boundary_results") == []
    assert await rows(db, "SELECT * FROM tenure.job_effects") == []
    assert await job_row(db, job.id) == after, "the holder's writes changed the revoked job"
    stats = worker.stop()
    assert stats["revoked"] == 1 and stats["succeeded"] == 0, stats


@pytest.mark.crash
@pytest.mark.slow
async def test_x11_requeue_of_a_frozen_worker_runs_the_job_elsewhere_at_once(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path
) -> None:
    """A holds the job inside its ctx.atomic transaction and is SIGSTOPped; revoke with requeue:
    B runs the job long before A's 30 s lease would end; SIGCONT A: its commit is refused by
    the fence (FENCED_ATOMIC), and only B's result row exists."""
    await db.execute(RESULTS_TABLE)
    worker_a = spawn_worker("worker-a", lease=LEASE)
    [job] = await queries.job_insert_many(
        db, [JobSpec(task="boundary.record_result", payload={"marker_dir": str(marker_dir)})]
    )
    await wait_for_marker(marker_dir, "started-1", timeout=20, procs=(worker_a,))
    worker_a.pause()
    app = tenure.Tenure(worker_dsn(db))
    await app.cancel([job.id], reason="worker-a hangs", requeue=True, actor="test")
    await app.close()
    requeued = await job_row(db, job.id)
    assert (requeued["state"], requeued["lease_token"], requeued["attempt_count"]) == ("pending", 2, 0)

    worker_b = spawn_worker("worker-b", lease=LEASE)

    async def done_by_b() -> dict[str, Any] | None:
        row = await job_row(db, job.id)
        return row if row["state"] == "succeeded" else None

    done = await wait_until(done_by_b, timeout=15, what="B to run the requeued job")
    assert done["lease_token"] == 3 and done["attempt_count"] == 1

    (marker_dir / "release-1").touch()
    worker_a.resume()

    async def refused() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] == "fencing_lost"]

    [lost] = await wait_until(refused, timeout=15, what="A's late commit to be refused")
    assert (lost["token"], lost["worker"], lost["error_code"]) == (1, "worker-a", "FENCED_ATOMIC")
    results = await rows(db, "SELECT job_id, token FROM public.boundary_results ORDER BY token")
    assert results == [{"job_id": job.id, "token": 3}], "A's rolled-back row must not exist"
    assert await job_row(db, job.id) == done
    worker_a.stop()
    worker_b.stop()


@pytest.mark.crash
@pytest.mark.slow
async def test_x11_a_pause_holds_off_two_worker_processes_until_resumed(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn_worker: Any, marker_dir: Path
) -> None:
    """Two worker processes serve the queue; after the pause commits, neither claims from it
    (checked for 10 poll intervals); resume and both drain it."""
    app = tenure.Tenure(worker_dsn(db))
    workers = [spawn_worker(f"w{i}", lease=LEASE, app=CONTROL_APP) for i in range(2)]
    [probe] = await queries.job_insert_many(
        db, [JobSpec(task="control.quick", queue="paused", payload={"marker_dir": str(marker_dir)})]
    )
    await wait_for_marker(marker_dir, f"ran-{probe.id}", timeout=20, procs=tuple(workers))
    await app.pause_queue("paused", reason="hold off", actor="test")
    held = await queries.job_insert_many(
        db,
        [
            JobSpec(task="control.quick", queue="paused", payload={"marker_dir": str(marker_dir)})
            for _ in range(6)
        ],
    )
    ids = [j.id for j in held]

    async def claimed() -> int:
        [row] = await rows(
            db, "SELECT count(*) AS n FROM tenure.jobs WHERE id = ANY(%s) AND attempt_count > 0", (ids,)
        )
        return int(row["n"])

    for _ in range(10):  # the workers poll every 0.2 s, and the enqueue notified them at once
        await asyncio.sleep(0.2)
        assert await claimed() == 0, "a worker claimed from a paused queue"
    await app.resume_queue("paused", actor="test")

    async def drained() -> bool:
        found = await rows(
            db,
            "SELECT count(*) AS n FROM tenure.jobs WHERE id = ANY(%s) AND state = 'succeeded'",
            (ids,),
        )
        return int(found[0]["n"]) == len(ids)

    await wait_until(drained, timeout=20, what="the resumed queue to drain")
    events = await rows(db, "SELECT event, actor FROM tenure.queue_events WHERE queue = 'paused' ORDER BY id")
    assert [(e["event"], e["actor"]) for e in events] == [("pause", "test"), ("resume", "test")]
    for worker in workers:
        worker.stop()
    await app.close()


def worker_dsn(db: psycopg.AsyncConnection[Any]) -> str:
    return db.info.dsn
