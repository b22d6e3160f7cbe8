"""Failover-aware leases (docs/guarantees.md "Across a failover").

With asynchronous replication a promoted standby may never have received a claim the old
primary acknowledged: on the new primary the job's row is as it was before that claim, with the
previous token. The next claim there hands out the SAME token the old holder still presents.
These tests make that happen on one server, without waiting for real replication lag: while a
real worker process holds a lease, its row is put back with SQL to what the new primary would
hold, and then:

- another worker claims the job under the reused token and completes it; the old holder's
  completion, arriving late, is refused (it must not count the other's success as its own);
- the old holder itself claims the job again under the reused token: it runs the job once,
  never twice side by side under one (owner, token);
- the row goes back to an older holder's live lease: the old holder sees its token went back,
  says so, and its writes are refused.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

BOUNDARIES = Path(__file__).resolve().parents[2] / "boundaries"
if str(BOUNDARIES) not in sys.path:
    sys.path.insert(0, str(BOUNDARIES))

from _harness import (  # noqa: E402
    WorkerProcess,
    job_events,
    job_row,
    rows,
    spawn_worker_process,
    wait_until,
)

from tenure.db.queries import Queries  # noqa: E402
from tenure.model.jobs import JobSpec  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.crash]

APP = "apps.failover_lease_app"
TASK = "failover.hold_in_transaction"
LEASE = 8.0
RESULTS = "CREATE TABLE public.failover_results (job_id bigint, token bigint, pid integer)"
#: The job's row as a promoted standby holds it when the claim of token %(token)s never reached
#: it: pending again, one attempt and one token fewer, no lease.
CLAIM_NEVER_REPLICATED = """
UPDATE tenure.jobs
SET state = 'pending', lease_token = lease_token - 1, attempt_count = attempt_count - 1,
    lease_owner = NULL, lease_expires_at = NULL, lease_deadline = NULL, attempted_at = NULL
WHERE id = %(id)s AND state = 'running' AND lease_token = %(token)s
"""


@pytest.fixture
def spawn(dsn: str, tmp_path: Path) -> Iterator[Any]:
    """Starts `tenure worker apps.failover_lease_app` processes; each is killed at teardown."""
    procs: list[WorkerProcess] = []

    def start(worker_id: str, concurrency: int = 1) -> WorkerProcess:
        extra = ("--concurrency", str(concurrency))
        proc = spawn_worker_process(dsn, tmp_path, worker_id, lease=LEASE, app=APP, extra=extra)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.cleanup()


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


async def inside(markers: Path, worker: WorkerProcess, timeout: float = 30) -> None:
    """Until `worker` is inside the job's transaction (its claim committed, its row written)."""

    async def probe() -> bool:
        assert worker.popen.poll() is None, f"{worker.worker_id} exited:\n{worker.log()[-3000:]}"
        return (markers / f"inside-{worker.pid}").exists()

    await wait_until(probe, timeout=timeout, what=f"{worker.worker_id} to start the job")


def starts(markers: Path, worker: WorkerProcess) -> list[str]:
    path = markers / f"starts-{worker.pid}"
    return path.read_text().split("\n")[:-1] if path.exists() else []


async def results(db: psycopg.AsyncConnection[Any]) -> list[tuple[int, int, int]]:
    found = await rows(db, "SELECT job_id, token, pid FROM public.failover_results ORDER BY pid")
    return [(r["job_id"], r["token"], r["pid"]) for r in found]


async def lose_the_claim(db: psycopg.AsyncConnection[Any], job_id: int, token: int) -> None:
    cur = await db.execute(CLAIM_NEVER_REPLICATED, {"id": job_id, "token": token})
    assert cur.rowcount == 1


async def state_is(db: psycopg.AsyncConnection[Any], job_id: int, **wanted: Any) -> dict[str, Any] | None:
    row = await job_row(db, job_id)
    return row if all(row[k] == v for k, v in wanted.items()) else None


async def test_a_reused_token_completed_by_another_worker_refuses_the_old_holder(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn: Any, markers: Path
) -> None:
    """A's claim is lost, B claims under the same token and completes: A's late commit is refused."""
    await db.execute(RESULTS)
    worker_a = spawn("worker-a")  # one slot, taken by the job: A cannot claim it again
    [job] = await queries.job_insert_many(db, [JobSpec(task=TASK, payload={"marker_dir": str(markers)})])
    await inside(markers, worker_a)
    await lose_the_claim(db, job.id, token=1)

    worker_b = spawn("worker-b")
    await inside(markers, worker_b)
    assert (await job_row(db, job.id))["lease_owner"] == "worker-b"
    assert (await job_row(db, job.id))["lease_token"] == 1, "B holds the token A still presents"
    (markers / f"release-{worker_b.pid}").touch()
    await wait_until(lambda: state_is(db, job.id, state="succeeded"), timeout=20, what="B to complete")
    settled = await job_row(db, job.id)

    # A resumes into its fenced completion, presenting (worker-a, 1): the token matches the
    # row's, the job succeeded under it, but not by A.
    (markers / f"release-{worker_a.pid}").touch()

    async def refused() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] == "fencing_lost"]

    [lost] = await wait_until(refused, timeout=20, what="A's refused completion to be recorded")
    assert (lost["token"], lost["worker"], lost["error_code"]) == (1, "worker-a", "FENCED_ATOMIC")
    assert await job_row(db, job.id) == settled
    assert await results(db) == [(job.id, 1, worker_b.pid)], "A's write must roll back with its refused fence"
    stats_a = worker_a.stop()
    assert stats_a["succeeded"] == 0 and stats_a["fencing_losses"] == 1, stats_a
    assert worker_b.stop()["succeeded"] == 1


async def test_a_worker_that_claims_its_own_reused_token_runs_the_job_once(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn: Any, markers: Path
) -> None:
    """A's claim is lost and A itself claims the job again under the same token: one run, one write."""
    await db.execute(RESULTS)
    worker_a = spawn("worker-a", concurrency=2)  # a free slot, to claim the job again
    [job] = await queries.job_insert_many(db, [JobSpec(task=TASK, payload={"marker_dir": str(markers)})])
    await inside(markers, worker_a)
    await lose_the_claim(db, job.id, token=1)
    await wait_until(
        lambda: state_is(db, job.id, state="running", lease_owner="worker-a", lease_token=1),
        timeout=20,
        what="A to claim the job again",
    )
    await asyncio.sleep(0.5)  # a second execution, if one were started, would be inside by now
    (markers / f"release-{worker_a.pid}").touch()
    await wait_until(lambda: state_is(db, job.id, state="succeeded"), timeout=20, what="A to complete")
    assert starts(markers, worker_a) == [f"{job.id} 1"], "A ran the job twice under one (owner, token)"
    assert await results(db) == [(job.id, 1, worker_a.pid)]
    stats = worker_a.stop()
    assert stats["succeeded"] == 1 and stats["claimed"] == 2, stats
    assert "claimed again under token 1, which this worker already holds" in worker_a.log()


async def test_a_token_gone_back_stops_the_holder_and_says_so(
    db: psycopg.AsyncConnection[Any], queries: Queries, spawn: Any, markers: Path
) -> None:
    """A holds token 2, the row goes back to token 1's live lease: A stops, says why, writes nothing."""
    await db.execute(RESULTS)
    [job] = await queries.job_insert_many(db, [JobSpec(task=TASK, payload={"marker_dir": str(markers)})])
    claim = {"queue": "default", "limit": 1, "default_lease_seconds": 1, "default_runtime_seconds": 600}
    [first] = await queries.job_claim(db, owner="old-holder", **claim)
    await wait_until(
        lambda: state_is(db, job.id, state="running", lease_token=1), timeout=5, what="the first claim"
    )
    await asyncio.sleep(1.1)
    await queries.lease_recover_expired(db, limit=10, backoff_base=0, backoff_cap=0, jitter=0)
    worker_a = spawn("worker-a")
    await inside(markers, worker_a)
    assert (await job_row(db, job.id))["lease_token"] == 2
    # On the new primary neither the recovery of token 1 nor A's claim of token 2 happened:
    # the old holder's lease is still live there.
    await db.execute(
        "UPDATE tenure.jobs SET lease_token = 1, lease_owner = 'old-holder', attempt_count = 1,"
        " lease_expires_at = now() + interval '60 seconds' WHERE id = %s",
        (job.id,),
    )
    started = time.monotonic()

    def said_so() -> bool:
        return "token went back from 2 to 1" in worker_a.log()

    await wait_until(lambda: asyncio.sleep(0, said_so()), timeout=LEASE, what="A to log its token went back")
    noticed = time.monotonic() - started
    (markers / f"release-{worker_a.pid}").touch()

    async def refused() -> list[dict[str, Any]]:
        return [e for e in await job_events(db, job.id) if e["event"] == "fencing_lost"]

    await wait_until(refused, timeout=10, what="A's refused completion to be recorded")
    row = await job_row(db, job.id)
    assert (row["state"], row["lease_owner"], row["lease_token"]) == ("running", "old-holder", 1)
    assert await results(db) == [], "nothing A wrote may land"
    stats = worker_a.stop()
    assert stats["succeeded"] == 0 and stats["leases_lost"] == 1, stats
    assert first.lease.token == 1
    print(f"\nA noticed its token went back {noticed:.2f}s after the row changed (lease {LEASE}s)")
