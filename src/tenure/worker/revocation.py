"""How a worker learns that it no longer holds a job it runs: an operator revoked it, or
the database gave it to someone else. Two paths reach the same check: the revoke notice on the
channel the listener already hears (at once), and every heartbeat (within one interval, also
for jobs that report no progress and when notifications are lost)."""

from __future__ import annotations

import logging

from tenure.worker.executor import Execution, Executor
from tenure.worker.health import describe_error
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: last_error_code of a job an operator revoked (job_cancel_many).
REVOKE_CODES = frozenset({"REVOKED", "REQUEUED"})


def _live(execution: Execution) -> bool:
    """Still running its handler under a lease this worker believes it holds."""
    ctx = execution.ctx
    return not (ctx.lease_lost or ctx.completed or execution.handler_done)


class RevocationCheck:
    def __init__(self, services: WorkerServices, executor: Executor) -> None:
        self.services = services
        self.executor = executor

    def notice(self, job_id: int, token: int) -> None:
        """A revoke notice arrived: check that lease now, if this worker runs it."""
        execution = self.executor.running.get((job_id, token))
        if execution is not None and _live(execution):
            self.services.in_background(self._check_quietly([(job_id, token)]))

    async def _check_quietly(self, leases: list[tuple[int, int]]) -> None:
        try:
            await self.check(leases)
        except Exception as exc:  # the next heartbeat checks again
            log.info("could not check revoked leases %s: %s", leases, describe_error(exc))

    async def check(self, leases: list[tuple[int, int]] | None = None) -> int:
        """Stops every running job (of `leases`, or all) whose lease the database no longer
        gives this worker; how many it stopped. Raises when the database cannot be asked."""
        running = self.executor.running
        wanted = list(running) if leases is None else leases
        candidates = [key for key in wanted if key in running and _live(running[key])]
        if not candidates:
            return 0
        services = self.services
        async with services.connection() as conn:
            gone = await services.queries.lease_check_many(conn, owner=services.owner, leases=candidates)
        stopped = 0
        for row in gone:
            execution = running.get((row.id, row.token))
            if execution is None or not _live(execution):
                continue  # finished meanwhile: its own write may be what the check saw
            if row.state == "succeeded" and row.current_token == row.token:
                continue  # its own ctx.atomic committed a moment before it says so
            if row.last_error_code in REVOKE_CODES and row.current_token != row.token:
                services.stats.revoked += 1
                self.executor.lose(execution, f"revoked by an operator: {row.last_error}", "REVOKED")
            elif row.current_token is not None and row.current_token < row.token:
                # Tokens only grow: a smaller one means the database lost our claim (a failover
                # to a standby that had not received it). The fence refuses our writes from here.
                self.executor.lose(
                    execution,
                    f"lease lost: the job's token went back from {row.token} to {row.current_token} "
                    f"({row.state}): the database lost this worker's claim, as after a failover to "
                    "a standby that had not received it",
                    "TOKEN_WENT_BACK",
                )
            else:
                state = row.state or "gone"
                self.executor.lose(
                    execution,
                    f"lease lost: the job is {state} under token {row.current_token}",
                    "LEASE_CHECK",
                )
            stopped += 1
        return stopped
