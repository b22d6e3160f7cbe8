"""A handler publishes a value for whoever enqueued it (`ctx.publish`): on its workflow when the
job is a step, else on the job. One fenced statement (job_publish, published.sql); the latest
value of a key stands. A holder whose lease was lost publishes nothing and learns so (LeaseLost)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from tenure.db.published_queries import PublishedQueries
from tenure.handler.job_services import JobServices
from tenure.model.errors import LeaseLost
from tenure.model.waits import bounded_json, check_published_key


class FencedContext(Protocol):
    """What a fenced write from a handler (a publish, a wait) needs of its running job's context
    (tenure.JobContext is one): the job, the attempt's token, and the attempt's own state."""

    @property
    def job_id(self) -> int: ...
    @property
    def token(self) -> int: ...
    def check(self) -> None: ...
    def mark_lost(self, reason: str) -> None: ...


async def run_publish(ctx: FencedContext, services: JobServices, key: str, value: Any) -> None:
    checked = check_published_key(key)
    text = bounded_json(value, "a published value")
    ctx.check()
    async with services.pool.connection() as conn:
        outcome = await PublishedQueries(services.queries.schema).publish(
            conn, job_id=ctx.job_id, owner=services.owner, token=ctx.token, key=checked, value_json=text
        )
    if outcome != "published":
        ctx.mark_lost("fence refused the publish")
        raise LeaseLost(ctx.job_id, ctx.token, "fence refused the publish")


def run_publish_sync(ctx: FencedContext, services: JobServices, key: str, value: Any) -> None:
    """`run_publish` for plain-function handlers: its statement runs on the worker's loop."""
    asyncio.run_coroutine_threadsafe(run_publish(ctx, services, key, value), services.loop).result()
