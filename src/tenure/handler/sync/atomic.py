# Generated from src/tenure/handler/atomic.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""ctx.atomic: a handler's work and its job's fenced completion in one transaction. Written
once, async; tools/async_to_sync.py writes its blocking twin (tenure.handler.sync.atomic), which thread
handlers run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from tenure.db.sync.handler_queries import HandlerQueries
from tenure.db.sync.replication_queries import ReplicationQueries
from tenure.handler.job_services import JobServices
from tenure.handler.sync_transaction import SyncTransaction, run_transaction_sync
from tenure.handler.txn import T, TransactionPolicy
from tenure.model.errors import LeaseLost
from tenure.model.jobs import ClaimedJob


class AtomicContext(Protocol):
    """What ctx.atomic needs of the job's context."""

    job: ClaimedJob
    completed: bool
    not_replicated: str | None

    @property
    def token(self) -> int: ...

    def check(self) -> None: ...

    def mark_lost(self, reason: str) -> None: ...


#: How often ctx.atomic reruns its unit while the job's row is locked by another session.
ROW_BUSY_ATTEMPTS = 8
ROW_STAYED_LOCKED = "the job's row stayed locked by another session"


class _RowBusy(Exception):
    """The job's row is locked by another session: roll the unit back and run it again."""


def _check_completion(ctx: AtomicContext, outcome: str | None) -> None:
    if outcome == "done":
        return
    if outcome == "busy":
        raise _RowBusy()
    raise LeaseLost(ctx.job.id, ctx.token, "fence failed at transactional completion")


def run_atomic_sync(
    ctx: AtomicContext,
    services: JobServices,
    work: Callable[[SyncTransaction], T],
    policy: TransactionPolicy | None,
) -> T:
    """Runs `work` and the job's fenced completion in one transaction (JobContext.atomic)."""
    ctx.check()
    lease, request = (ctx.job.id, ctx.token), str(ctx.job.id)
    queries = HandlerQueries(services.queries.schema)
    replication = ReplicationQueries(services.queries.schema)

    def unit(tx: SyncTransaction) -> T:
        result = work(tx)
        # No result notification here: the result follows the commit (job_result_set).
        # A success already recorded under this token is not ours to commit beside: after a
        # failover that lost a claim, another worker can hold (and finish) the same token.
        outcome = queries.job_complete_many(
            tx.conn, owner=services.owner, leases=[lease], notify_results=False, repeat_is_done=False
        )
        _check_completion(ctx, outcome.get(lease))
        # A rolled-back unit takes its SETs with it; a committed one must not leave them.
        queries.session_reset(tx.conn)
        return result

    try:
        for attempt in range(1, ROW_BUSY_ATTEMPTS + 1):
            try:
                pool = services.sync_pool()
                with (
                    pool.connection() as conn,
                    replication.acknowledged(conn, strict=services.require_sync_replication) as ack,
                ):
                    result = run_transaction_sync(conn, unit, policy=policy, request_id=request)
                break
            except _RowBusy:
                ctx.check()
                if attempt == ROW_BUSY_ATTEMPTS:
                    raise LeaseLost(ctx.job.id, ctx.token, "the job's row stayed locked elsewhere") from None
                time.sleep(min(1.0, 0.05 * 2**attempt))
    except LeaseLost as exc:
        ctx.mark_lost(exc.reason)
        services.record_fencing_loss_threadsafe(ctx.job, "FENCED_ATOMIC")
        raise
    ctx.completed = True
    # Committed: on a synchronous standby too, or (the worker reports it) not known to be.
    ctx.not_replicated = ack.problem
    return result
