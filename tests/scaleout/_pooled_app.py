"""The app the worker processes of tests/scaleout run, on queue `pooled`."""

from __future__ import annotations

import asyncio
from typing import Any

import tenure

app = tenure.Tenure()

#: A session setting a handler makes inside ctx.atomic; it must not outlive the transaction.
LEAKED_TIMEOUT = "4321ms"


@app.task(name="pooled.noop", queue="pooled")
async def noop(ctx: tenure.JobContext) -> None:
    """Does nothing, successfully."""


@app.task(name="pooled.deposit", queue="pooled")
async def deposit(ctx: tenure.JobContext, amount: int) -> None:
    """Writes a deposit and completes the job in one transaction; sets a session timeout in it."""

    async def work(tx: Any) -> None:
        await tx.execute(f"SET statement_timeout = '{LEAKED_TIMEOUT}'")
        await tx.execute(
            "INSERT INTO public.deposits (job_id, token, amount) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.token, amount),
        )

    await ctx.atomic(work)


@app.task(name="pooled.deposit_sync", queue="pooled")
def deposit_sync(ctx: tenure.JobContext, amount: int) -> None:
    """`deposit` for a plain-function handler, through the worker's blocking pool."""

    def work(tx: Any) -> None:
        tx.execute(f"SET statement_timeout = '{LEAKED_TIMEOUT}'")
        tx.execute(
            "INSERT INTO public.deposits (job_id, token, amount) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.token, amount),
        )

    ctx.atomic_sync(work)


#: At most this many `pooled.limited` jobs run at once, across workers (a global limit).
LIMITED_MAX_RUNNING = 2
app.limit("pooled_limited", max_running=LIMITED_MAX_RUNNING)


@app.task(name="pooled.limited", queue="pooled_limited")
async def limited(ctx: tenure.JobContext) -> None:
    """Runs a little while, so that claims of the limited queue meet jobs still running, and
    records its run from its claim to its completion, both on the database clock."""
    await asyncio.sleep(0.05)

    async def record(tx: Any) -> None:
        await tx.execute(
            "INSERT INTO public.runs (job_id, claimed, completed) VALUES (%s, %s, clock_timestamp())",
            (ctx.job.id, ctx.job.db_now),
        )

    await ctx.atomic(record)


@app.task(name="pooled.answer", queue="pooled")
async def answer(ctx: tenure.JobContext) -> int:
    """Answers after a moment, so that a waiter is already waiting when the job finishes."""
    await asyncio.sleep(0.5)
    return 42


@app.task(name="pooled.tally", queue="pooled")
async def tally(ctx: tenure.JobContext) -> None:
    """Records which worker ran the job, under which token, in one transaction with its
    completion: a second application of the job would meet the table's primary key."""

    async def record(tx: Any) -> None:
        await tx.execute(
            "INSERT INTO public.tally (job_id, token, worker) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.token, ctx.job.lease.owner),
        )

    await ctx.atomic(record)
