"""The worker's own vacuum of `jobs`, run when autovacuum's trigger for the table says it is due.

Every claim or completion leaves the job's old row version dead, and its entry in the claimable
indexes behind with it: the next claim walks past every such entry at the front of the index
before it finds a live one, until a vacuum removes them. Autovacuum visits a database once a
`autovacuum_naptime` (a minute by default) and then works under its cost delay; a queue draining
thousands of jobs a second leaves hundreds of thousands of dead entries in that time, and each
claim walks them all (a million-job backlog drained at a third of the rate of an empty queue's
drain). So each worker checks, every few seconds, whether `jobs` holds more dead row versions than
autovacuum's own trigger for it (the table's storage parameters, which Tenure's migration sets to
1% of its rows), and vacuums it itself when it does: the same vacuum autovacuum would run, without
waiting for its turn.

Safe from any number of workers at once: the vacuum skips the table when another vacuum
(autovacuum's, another worker's) holds it, and never truncates the table (which takes a lock
every claim would queue behind). A vacuum that removes too little (an old snapshot somewhere keeps
the dead versions visible) makes the next check wait twice as long, up to a limit. A role that may
not vacuum the table turns the service off, once, with a hint.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from psycopg import AsyncConnection

from tenure.db.connect import connect
from tenure.db.ops_queries import OpsQueries
from tenure.worker.health import ServiceHealth
from tenure.worker.service import Service

log = logging.getLogger("tenure.worker")

#: The longest a check waits after vacuums that could not remove what they found (seconds).
MAX_BACKOFF = 300.0


class JobsVacuum(Service):
    """Checks every `check_every` seconds (the first check at a random offset, so a fleet started
    together does not check in lockstep) and vacuums `jobs` when autovacuum's trigger says so."""

    name = "jobs vacuum"

    def __init__(
        self,
        dsn: str,
        schema: str,
        health: ServiceHealth,
        *,
        connection: Callable[[], AbstractAsyncContextManager[AsyncConnection[Any]]],
        check_every: float,
    ) -> None:
        self.dsn = dsn
        self.ops = OpsQueries(schema)
        self.health = health
        self.connection = connection
        self.check_every = check_every
        self.on = True
        #: Vacuums in a row that left at least half the dead row versions they found.
        self.futile = 0
        #: The wait before the first check, taken by the first pass's next_delay.
        self._offset: float | None = random.uniform(0.0, check_every)

    async def run_once(self) -> bool:
        """Whether this pass vacuumed."""
        if not self.on or self._offset is not None:
            return False
        async with self.connection() as conn:
            before = await self.ops.jobs_vacuum_due(conn)
        if not before.may_vacuum:
            log.warning(
                "this worker does not vacuum the jobs table: its role does not own it (from "
                "PostgreSQL 17, GRANT MAINTAIN ON the jobs table to the worker's role turns it on); "
                "autovacuum alone keeps the claimable indexes clean"
            )
            self.on = False
            return False
        if not before.due:
            self.futile = 0
            return False
        # A connection of its own, outside the pool and its statement bound: a vacuum of a large
        # table takes longer than any claim may, and holds no slot a claim or completion needs.
        async with await connect(self.dsn, name="tenure-vacuum") as conn:
            await self.ops.jobs_vacuum(conn)
            after = await self.ops.jobs_vacuum_due(conn)
        self.futile = self.futile + 1 if after.dead_rows * 2 >= before.dead_rows else 0
        log.debug(
            "vacuumed the jobs table: %d dead row versions before, %d after",
            before.dead_rows,
            after.dead_rows,
        )
        return True

    def next_delay(self, vacuumed: bool) -> float:
        if not self.on:
            return 3600.0  # off: nothing to do until the worker restarts
        if self._offset is not None:
            offset, self._offset = self._offset, None
            return offset
        return min(MAX_BACKOFF, self.check_every * (1 << min(self.futile, 16)))
