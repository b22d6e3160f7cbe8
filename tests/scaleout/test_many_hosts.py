"""Worker hosts with no coordination but the database: three network namespaces, each with its
own workers, draining one queue through one PgBouncer in front of one PostgreSQL."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _bouncer import Bouncer, WorkerProcesses, launch_pgbouncer, rows, states, wait_until
from psycopg import conninfo

from tenure.db.queries import Queries
from tenure.lab.soak.network import WorkerNetwork
from tenure.model.jobs import JobSpec

pytestmark = pytest.mark.slow

#: PgBouncer's server connections for the test's database: six workers share them.
POOL_SIZE = 6
HOSTS = 3
WORKERS_PER_HOST = 2
JOBS = 1500


@pytest.fixture
def hosts() -> Iterator[list[WorkerNetwork]]:
    """Three worker hosts: network namespaces joined to this host by veth pairs (root needed;
    without it the test fails, it is not skipped)."""
    tag = uuid.uuid4().hex[:4]
    made: list[WorkerNetwork] = []
    try:
        for n in range(HOSTS):
            made.append(WorkerNetwork.create(f"h{n}{tag}"))
        yield made
    finally:
        for net in made:
            net.destroy()


@pytest.fixture
def open_bouncer(pg15_server: str, tmp_path: Path) -> Iterator[Bouncer]:
    """PgBouncer listening on every address of this host, so the namespaces reach it over their
    veth pairs; the pg15 server behind it stays on loopback."""
    with launch_pgbouncer(pg15_server, tmp_path, pool_size=POOL_SIZE, listen_addr="*") as bouncer:
        yield bouncer


async def test_three_hosts_drain_one_queue_through_pgbouncer_each_job_once(
    db: psycopg.AsyncConnection[Any],
    dsn: str,
    hosts: list[WorkerNetwork],
    open_bouncer: Bouncer,
    workers: WorkerProcesses,
) -> None:
    """Two workers on each of three namespaces, connected through PgBouncer by their host's
    address, drain 1,500 jobs: each applied exactly once under its first token, every host
    doing a share, with at most PgBouncer's pool of server connections on PostgreSQL."""
    assert shutil.which("ip"), "iproute2 is missing: run scripts/install-system-deps.sh"
    await db.execute("CREATE TABLE public.tally (job_id bigint PRIMARY KEY, token bigint, worker text)")
    await Queries("tenure").job_insert_many(db, [JobSpec(task="pooled.tally", queue="pooled")] * JOBS)
    started = []
    for n, net in enumerate(hosts):
        # The host end of this namespace's veth pair: the address its workers reach PgBouncer at.
        routed = conninfo.make_conninfo(open_bouncer.route(dsn), host=net.host_ip)
        for w in range(WORKERS_PER_HOST):
            started.append(
                workers.start(
                    routed,
                    "--prepare-threshold", "none", "--no-listen", "--poll-interval", "0.1",
                    "--concurrency", "8",
                    prefix=net.command_prefix(),
                    name=f"host{n}-w{w}",
                )
            )  # fmt: skip

    async def drained() -> bool:
        return await states(db) == {"succeeded": JOBS}

    await wait_until(drained, timeout=120, what=f"{JOBS} jobs to succeed", workers=tuple(started))
    for worker in started:
        assert worker.stop() == 0, worker.log()[-2000:]
    [row] = await rows(db, "SELECT count(*) AS n, max(token) AS token FROM public.tally")
    assert (row["n"], row["token"]) == (JOBS, 1)
    shares = await rows(
        db,
        "SELECT split_part(worker, '-', 1) AS host, count(*) AS jobs FROM public.tally GROUP BY 1 ORDER BY 1",
    )
    assert [r["host"] for r in shares] == [f"host{n}" for n in range(HOSTS)], shares
    assert all(r["jobs"] > 0 for r in shares)
