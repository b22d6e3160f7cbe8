"""The worker role may not vacuum `jobs` (it does not own it): its worker's vacuum turns itself
off, once, with a hint, and the table is not vacuumed."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _roles import SCHEMA, as_role
from psycopg import AsyncConnection

from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.security.roles import Role
from tenure.worker.health import ServiceHealthBoard
from tenure.worker.maintenance import JobsVacuum
from tenure.worker.options import WorkerOptions
from tenure.worker.services import WorkerServices


async def test_a_worker_role_that_may_not_vacuum_turns_the_vacuum_off_with_a_hint(
    dsn: str, db: AsyncConnection[Any], roles: dict[Role, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A role that does not own `jobs` (and has no MAINTAIN) gets a warning naming the grant, no
    vacuum, and no further check until the worker restarts."""
    worker_dsn = as_role(dsn, roles[Role.WORKER])
    pool = await open_pool(worker_dsn, min_size=1, max_size=1)
    try:
        services = WorkerServices(pool=pool, queries=Queries(SCHEMA), options=WorkerOptions(), dsn=worker_dsn)
        vacuum = JobsVacuum(
            worker_dsn,
            SCHEMA,
            ServiceHealthBoard(120.0).service(JobsVacuum.name),
            connection=services.connection,
            check_every=1.0,
        )
        vacuum.next_delay(False)  # the first check's random offset, taken
        with caplog.at_level(logging.WARNING, logger="tenure.worker"):
            assert await vacuum.run_once() is False
            assert await vacuum.run_once() is False
    finally:
        await pool.close()
    hints = [r.getMessage() for r in caplog.records if "vacuum" in r.getMessage()]
    assert len(hints) == 1 and "GRANT MAINTAIN" in hints[0]
    assert vacuum.next_delay(False) == 3600.0
    row = await (await db.execute("SELECT pg_stat_get_vacuum_count('tenure.jobs'::regclass)")).fetchone()
    assert row is not None and row[0] == 0
