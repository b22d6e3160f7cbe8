"""The soak's Tenure app: the demo bank's transfer and the other kinds of job.

Workers load it like any user app (`tenure worker tenure.lab.soak.app`). Every handler records its
execution interval in the worker's attempt log, which is how the soak measures how long two attempts overlap.
"""

from __future__ import annotations

import asyncio
import enum
import time
from typing import Any

import psycopg

from tenure import Backoff, JobContext, Permanent, Snooze, SyncTransaction, TaskOptions, Tenure, Transient
from tenure.lab.soak import orm
from tenure.lab.soak.attempts import AttemptLog
from tenure.lab.soak.ordered_effects import make_handlers
from tenure.lab.soak.queries import INJECTED_TASK, SoakQueries
from tenure.lab.soak.workflows import make_handlers as make_step_handlers
from tenure.ops.demo.bank import TRANSFER_TXN, bank
from tenure.ops.demo.bank import transfer as bank_transfer
from tenure.worker.executor import around_thread_handlers

QUEUE = "soak"
MAX_ATTEMPTS = 25


class Kind(enum.StrEnum):
    """Each kind of job, by task name, and what it must end as."""

    TRANSFER = "soak.transfer"
    NOOP = "soak.noop"
    SLOW = "soak.slow"
    FLAKY = "soak.flaky"
    DOOMED = "soak.doomed"
    ORDERED = "soak.ordered"
    EFFECT = "soak.effect"
    THREAD_SLOW = "soak.thread_slow"
    OWN_TIMEOUT = "soak.own_timeout"
    NUL_ERROR = "soak.nul_error"
    REFUSED = "soak.refused_transfer"
    SNOOZE = "soak.snooze"
    THREAD_SNOOZE = "soak.thread_snooze"
    LIMITED = "soak.limited"
    WAIT = "soak.wait"
    THREAD_WAIT = "soak.thread_wait"
    TICK = "soak.tick"
    ORM = "soak.orm"
    #: Rows a fault writes with the worst values the database accepts: not the workload's jobs.
    INJECTED = INJECTED_TASK


#: A queue with a global limit: the soak samples its live leases, which must never exceed it.
LIMITED_QUEUE, LIMITED_MAX = "soak.limited", 3
#: The schedule the soak's workers fire every second; through every fault, each slot once.
TICK_SCHEDULE = Kind.TICK.value
#: Slots a restarted fleet fires for the seconds it missed: more than any fault lasts.
TICK_BACKFILL = 600


#: How many times the snoozing kinds snooze before they return their result.
SNOOZES = 2


app = Tenure()
attempts = AttemptLog()
_policy: TaskOptions = {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS, "backoff": Backoff(base=0.05, cap=1.0)}


def transfer(ctx: JobContext, source: int, target: int, amount: int) -> None:
    """The demo's transfer: ledger row and fenced completion commit together or not at all."""
    with attempts.running(ctx):
        bank_transfer(ctx, source=source, target=target, amount=amount)


async def noop(ctx: JobContext) -> None:
    """Nothing but the queue's own work: claim and fenced completion."""
    with attempts.running(ctx):
        pass


async def slow(ctx: JobContext, steps: int, step_seconds: float) -> None:
    """Runs for longer than the lease and reports progress, so only heartbeats keep it."""
    with attempts.running(ctx):
        for step in range(steps):
            await asyncio.sleep(step_seconds)
            ctx.progress({"step": step + 1})  # raises LeaseLost once the lease is gone


async def flaky(ctx: JobContext, fail_times: int) -> None:
    """Fails transiently on its first `fail_times` attempts, then succeeds."""
    with attempts.running(ctx):
        if ctx.attempt <= fail_times:
            raise Transient(
                f"attempt {ctx.attempt} of {fail_times} planned failures", code="FLAKY", delay=0.05
            )


async def doomed(ctx: JobContext, reason: str) -> None:
    """Can never succeed: dead on its first attempt, never retried."""
    with attempts.running(ctx):
        raise Permanent(reason, code="DOOMED")


def thread_slow(ctx: JobContext, steps: int, step_seconds: float) -> None:
    """`slow` as a plain function: a worker thread, kept alive only by its progress heartbeats,
    stopped (LeaseLost at ctx.progress) only by its own checks once its lease is gone."""
    with attempts.running(ctx):
        for step in range(steps):
            time.sleep(step_seconds)
            ctx.progress({"step": step + 1})


async def own_timeout(ctx: JobContext, fail_times: int) -> None:
    """Raises its own TimeoutError (an upstream call timing out) on its first attempts: that is
    the handler's failure, retried as transient, never Tenure's MAX_RUNTIME."""
    with attempts.running(ctx):
        if ctx.attempt <= fail_times:
            raise TimeoutError(f"the upstream call timed out (attempt {ctx.attempt})")


def nul_error(ctx: JobContext) -> None:
    """Fails once with a NUL in its message (binary data quoted in an error), then succeeds."""
    with attempts.running(ctx):
        if ctx.attempt == 1:
            raise ValueError("record 7 holds a \x00 byte where text was expected")


def refused_transfer(ctx: JobContext, source: int, target: int, amount: int) -> None:
    """A transfer whose unit moves the money, then meets a constraint it expects inside a
    savepoint and refuses as Permanent: dead at once, and the money movement rolls back."""
    with attempts.running(ctx):

        def move(tx: SyncTransaction) -> None:
            bank.lock_pair(tx, source, target)
            bank.apply(tx, ctx, source=source, target=target, amount=amount)
            try:
                with tx.savepoint():
                    _soak_sql.account_reopen(tx, source)
            except psycopg.errors.UniqueViolation:
                raise Permanent(f"account {source} is already open", code="ACCOUNT_EXISTS") from None

        ctx.atomic_sync(move, policy=TRANSFER_TXN)


_soak_sql = SoakQueries("tenure")


async def snooze(ctx: JobContext, wait: float) -> Any:
    """Not ready the first SNOOZES times it runs (no attempt spent), then returns its result,
    which a caller waits for (enqueued with result_wanted)."""
    with attempts.running(ctx):
        if ctx.snoozes < SNOOZES:
            return Snooze(wait, "not ready yet")
        return {"snoozed": ctx.snoozes, "attempt": ctx.attempt}


def thread_snooze(ctx: JobContext, wait: float) -> Any:
    """`snooze` as a plain function: it raises the Snooze instead of returning it."""
    with attempts.running(ctx):
        if ctx.snoozes < SNOOZES:
            raise Snooze(wait, "not ready yet")
        return {"snoozed": ctx.snoozes, "attempt": ctx.attempt}


#: How long a waiting kind waits for its signal: far beyond the soak, so every wait must end by
#: its signal, whatever the faults.
WAIT_TIMEOUT = 3600.0


async def wait(ctx: JobContext, signal: str) -> Any:
    """Waits for the signal to `signal` (sent before its enqueue or at some time after, maybe
    twice with one idempotency key), then returns what arrived. Its handler runs again from the
    top when the signal comes, and the wait then returns it."""
    with attempts.running(ctx):
        got = await ctx.wait_for(signal, timeout=WAIT_TIMEOUT)
        return {"outcome": got.outcome, "payload": got.payload, "signal_id": got.signal_id}


def thread_wait(ctx: JobContext, signal: str) -> Any:
    """`wait` as a plain function."""
    with attempts.running(ctx):
        got = ctx.wait_for_sync(signal, timeout=WAIT_TIMEOUT)
        return {"outcome": got.outcome, "payload": got.payload, "signal_id": got.signal_id}


async def limited(ctx: JobContext, seconds: float) -> None:
    """Work on a queue that may run only LIMITED_MAX jobs at once, cluster-wide."""
    with attempts.running(ctx):
        await asyncio.sleep(seconds)


def orm_read(ctx: JobContext, account: int) -> None:
    """A plain function reading through its thread's own long-lived connection (see soak.orm)."""
    with attempts.running(ctx):
        orm.read_balance(account)


async def injected(ctx: JobContext, note: str) -> None:
    """Runs the rows a fault enqueued with the largest values the database accepts."""
    with attempts.running(ctx):
        pass


async def tick(ctx: JobContext) -> None:
    """Fired by the soak's every-second schedule."""
    with attempts.running(ctx):
        pass


app.task(transfer, name=Kind.TRANSFER.value, **_policy)
app.task(noop, name=Kind.NOOP.value, **_policy)
app.task(slow, name=Kind.SLOW.value, **_policy)
app.task(flaky, name=Kind.FLAKY.value, **_policy)
app.task(doomed, name=Kind.DOOMED.value, **_policy)
ordered, effect = make_handlers(attempts)
app.task(ordered, name=Kind.ORDERED.value, **_policy)
app.task(effect, name=Kind.EFFECT.value, **_policy)
app.task(thread_slow, name=Kind.THREAD_SLOW.value, **_policy)
app.task(own_timeout, name=Kind.OWN_TIMEOUT.value, **_policy)
app.task(nul_error, name=Kind.NUL_ERROR.value, **_policy)
app.task(refused_transfer, name=Kind.REFUSED.value, **_policy)
app.task(snooze, name=Kind.SNOOZE.value, **_policy)
app.task(thread_snooze, name=Kind.THREAD_SNOOZE.value, **_policy)
app.task(wait, name=Kind.WAIT.value, **_policy)
app.task(thread_wait, name=Kind.THREAD_WAIT.value, **_policy)
app.task(limited, name=Kind.LIMITED.value, queue=LIMITED_QUEUE, max_attempts=MAX_ATTEMPTS)
app.limit(LIMITED_QUEUE, max_running=LIMITED_MAX)
app.task(tick, name=TICK_SCHEDULE, **_policy)
app.task(orm_read, name=Kind.ORM.value, **_policy)
app.task(injected, name=Kind.INJECTED.value, **_policy)
for _name, _step in make_step_handlers(attempts).items():
    app.task(_step, name=_name, **_policy)
app.schedule(TICK_SCHEDULE, "* * * * * *", name=TICK_SCHEDULE, missed=("backfill", TICK_BACKFILL))
# Around every thread handler of the worker's process, as the Django contrib registers its own.
around_thread_handlers(orm.fresh_connections)
