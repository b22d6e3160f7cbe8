"""Each job runs in an asyncio task of its own, however it starts (eagerly on Python 3.12+): its
handler sees its own task as the current one, so a timeout inside it cancels only the handler,
and a handler that finishes without suspending succeeds like any other."""

from __future__ import annotations

import asyncio
from typing import Any

from _inprocess import running, wait_state
from psycopg import AsyncConnection

from tenure import JobContext, Tenure


async def test_a_handlers_current_task_is_its_own_and_its_timeout_cancels_only_it(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """asyncio.timeout() entered before the handler's first suspension cancels that handler, not
    the worker's claimer: the timed-out job fails, and the jobs after it are still claimed."""
    app = Tenure(dsn)
    seen: dict[int, str] = {}

    @app.task(name="timed", max_attempts=1)
    async def timed(ctx: JobContext, wait: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        seen[ctx.job_id] = task.get_name()
        async with asyncio.timeout(0.05):
            await asyncio.sleep(wait)

    slow = await app.enqueue(timed, {"wait": 5.0})
    async with running(app, concurrency=4):
        failed = await wait_state(db, slow.id, "dead")
        quick = [await app.enqueue(timed, {"wait": 0.0}) for _ in range(3)]
        for job in quick:
            await wait_state(db, job.id, "succeeded")
    assert failed["last_error_code"] == "TimeoutError"
    assert seen == {j.id: f"tenure-job-{j.id}" for j in [slow, *quick]}


async def test_handlers_that_never_suspend_all_succeed(dsn: str, db: AsyncConnection[Any]) -> None:
    """A handler that returns in its first step (done before it would have been scheduled, on
    Python 3.12+) has its success written like any other, each job once."""
    app = Tenure(dsn)
    ran: list[int] = []

    @app.task(name="instant")
    async def instant(ctx: JobContext, n: int) -> int:
        ran.append(n)
        return n * 2

    jobs = await app.client.enqueue_many([app.client.builder.spec("instant", {"n": n}) for n in range(50)])
    async with running(app, concurrency=10):
        rows = [await wait_state(db, job.id, "succeeded") for job in jobs]
    assert sorted(ran) == list(range(50))
    assert [r["result"] for r in rows] == [n * 2 for n in range(50)]
