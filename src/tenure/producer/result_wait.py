"""Waiting for a job's result: read it, wait for its notification or the poll interval, read
again (the rules are in tenure.producer.results). Written once, async; tools/async_to_sync.py writes its
blocking twin (tenure.producer.sync.result_wait)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import sql

from tenure.db.connect import application_name, describe_dsn
from tenure.db.control_queries import ControlQueries
from tenure.db.pooler import behind_pooler
from tenure.db.published_queries import PublishedQueries
from tenure.model.waits import Published
from tenure.producer.results import POOLED_LISTENER, ResultTimeout, check_wait, settled, wait_interval
from tenure.tasks import TaskRegistry

ASYNC = True

log = logging.getLogger("tenure.client")


@contextlib.asynccontextmanager
async def _listening(dsn: str | None, channel: str) -> AsyncIterator[psycopg.AsyncConnection[Any] | None]:
    if dsn is None:
        yield None
        return
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, **application_name(dsn, "tenure-result")
        )
        if await behind_pooler(conn):
            await conn.close()
            log.info(POOLED_LISTENER, describe_dsn(dsn))
            yield None
            return
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except psycopg.Error:
        yield None  # polling still answers
        return
    try:
        yield conn
    finally:
        await conn.close()


async def _notified(
    listener: psycopg.AsyncConnection[Any] | None, payload: str, wait: float
) -> psycopg.AsyncConnection[Any] | None:
    """Waits up to `wait` seconds for a notification carrying `payload` (without a listener, the
    whole `wait`). Returns the listener to go on with: None once it was lost (poll from then on)."""
    if listener is None:
        await asyncio.sleep(wait)
        return None
    try:
        async for note in listener.notifies(timeout=wait):
            if note.payload == payload:
                break
    except psycopg.Error:
        return None
    return listener


async def wait_for_result(
    control: ControlQueries,
    connection: Any,
    job_id: int,
    *,
    timeout: float | None,
    poll: float,
    listen_dsn: str | None,
    registry: TaskRegistry | None = None,
) -> Any:
    """The job's result once it succeeded, typed by its task's return annotation when `registry`
    knows the task. `connection()` lends a connection for each read."""
    check_wait(timeout, poll)
    deadline = None if timeout is None else time.monotonic() + timeout
    async with _listening(listen_dsn, control.results_channel) as listener:
        while True:
            async with connection() as conn:
                row = await control.result(conn, job_id)
                step = None if row is not None else await control.unreleased_step(conn, job_id)
                if row is None and step is None:
                    # A step released between the two reads: its job committed with the release.
                    row = await control.result(conn, job_id)
            done, value = settled(row, job_id, step, registry)
            if done:
                return value
            interval = wait_interval(poll, listening=listener is not None, row=row)
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            if wait <= 0:
                assert timeout is not None
                raise ResultTimeout(job_id, timeout, value)
            listener = await _notified(listener, str(job_id), wait)


async def wait_for_published(
    queries: PublishedQueries,
    connection: Any,
    key: str,
    *,
    workflow_id: int | None,
    job_id: int | None,
    timeout: float | None,
    poll: float,
    listen_dsn: str | None,
) -> Published | None:
    """The value published under `key` on the workflow (or the job), waiting up to `timeout`
    seconds (None: for ever) for one to be published; None when none was by then. Woken by the
    publish's notification, and reads again every `poll` seconds in case one was lost."""
    check_wait(timeout, poll)
    deadline = None if timeout is None else time.monotonic() + timeout
    owner = f"published:workflow:{workflow_id}" if workflow_id is not None else f"published:job:{job_id}"
    async with _listening(listen_dsn if timeout != 0 else None, queries.results_channel) as listener:
        while True:
            async with connection() as conn:
                found = await queries.get(conn, key=key, workflow_id=workflow_id, job_id=job_id)
            if found is not None:
                return found
            wait = poll if deadline is None else min(poll, deadline - time.monotonic())
            if wait <= 0:
                return None
            listener = await _notified(listener, owner, wait)
