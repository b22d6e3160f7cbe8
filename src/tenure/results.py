"""Waiting for a job's result.

A waiter reads the job, and while it is unfinished waits for a notification on the results
channel (`result_wanted` jobs send one when they finish) or for its poll interval, then reads
again. Jobs nobody waits for send no notification; a waiter for such a job, or one whose
LISTEN cannot work, simply polls at its poll interval. A LISTEN through a transaction pooler
(PgBouncer) is taken, and never heard: the waiter finds out that its listening connection goes
through one before it relies on it, and polls instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg import sql

from tenure.db.connect import application_name, describe_dsn
from tenure.db.control_queries import ControlQueries
from tenure.db.pooler import behind_pooler, behind_pooler_sync
from tenure.errors import TenureError, ValidationError

log = logging.getLogger("tenure.client")

#: How long after its success a waited-for job's result may still be on its way (its handler
#: completed in its own transaction; the worker stores the result right after): past this the
#: worker is presumed gone, and the job has no result.
RESULT_GRACE_SECONDS = 10.0
#: Said (at INFO) when a waiter's listening connection turns out to go through a pooler.
_POOLED = (
    "waiting for a result by polling: %s goes through a pooler, where a LISTEN hears nothing; "
    "set TENURE_LISTEN_DSN to the server's own address to be woken at once"
)
#: With LISTEN working, the row is still read this many poll intervals apart, in case a
#: notification was lost (a reconnect, a failover).
LISTENING_POLL_FACTOR = 5


class JobFailed(TenureError):
    """The job a caller waited for ended dead or cancelled; its last error is attached."""

    def __init__(self, job_id: int, state: str, error_code: str | None, error: str | None) -> None:
        first = (error or "").strip().splitlines()[-1:] or [""]
        detail = f": {error_code}" if error_code else ""
        detail += f": {first[0][:300]}" if first[0] else ""
        super().__init__(f"job {job_id} is {state}{detail}")
        self.job_id = job_id
        self.state = state
        self.error_code = error_code
        self.error = error


class ResultTimeout(TenureError, TimeoutError):
    """The job did not finish within the time the caller waited; it goes on unchanged."""

    def __init__(self, job_id: int, timeout: float, state: str) -> None:
        super().__init__(f"job {job_id} is still {state} after {timeout:g}s")
        self.job_id = job_id
        self.state = state


def settled(row: dict[str, Any] | None, job_id: int) -> tuple[bool, Any]:
    """(True, result) for a succeeded job, (False, state) for an unfinished one; raises
    JobFailed for a dead or cancelled one."""
    if row is None:
        raise ValidationError(f"there is no job {job_id}")
    state = row["state"]
    if state == "succeeded":
        if row["result_pending"] and (row["finished_seconds_ago"] or 0.0) < RESULT_GRACE_SECONDS:
            return False, "succeeded, its result on its way"
        return True, row["result"]
    if state in ("dead", "cancelled"):
        raise JobFailed(job_id, state, row["last_error_code"], row["last_error"])
    return False, state


def _interval(poll: float, *, listening: bool, row: dict[str, Any] | None) -> float:
    """How long to wait before reading the job again: a job that notifies when it finishes is
    read only now and then in case a notification was lost; any other is polled."""
    if listening and row is not None and row["result_wanted"]:
        return poll * LISTENING_POLL_FACTOR
    return poll


def _check_wait(timeout: float | None, poll: float) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise ValidationError(f"timeout must be seconds >= 0 or None (wait for ever), got {timeout!r}")
    if isinstance(poll, bool) or not isinstance(poll, int | float) or poll <= 0:
        raise ValidationError(f"poll must be a positive number of seconds, got {poll!r}")


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
            log.info(_POOLED, describe_dsn(dsn))
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


async def wait_for_result(
    control: ControlQueries,
    connection: Any,
    job_id: int,
    *,
    timeout: float | None,
    poll: float,
    listen_dsn: str | None,
) -> Any:
    """The job's result once it succeeded. `connection()` lends a connection for each read."""
    _check_wait(timeout, poll)
    deadline = None if timeout is None else time.monotonic() + timeout
    async with _listening(listen_dsn, control.results_channel) as listener:
        while True:
            async with connection() as conn:
                row = await control.result(conn, job_id)
            done, value = settled(row, job_id)
            if done:
                return value
            interval = _interval(poll, listening=listener is not None, row=row)
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            if wait <= 0:
                assert timeout is not None
                raise ResultTimeout(job_id, timeout, value)
            if listener is None:
                await asyncio.sleep(wait)
                continue
            try:
                async for note in listener.notifies(timeout=wait):
                    if note.payload == str(job_id):
                        break
            except psycopg.Error:
                listener = None  # lost: poll from here on


@contextlib.contextmanager
def _listening_sync(dsn: str | None, channel: str) -> Iterator[psycopg.Connection[Any] | None]:
    if dsn is None:
        yield None
        return
    try:
        conn = psycopg.Connection.connect(dsn, autocommit=True, **application_name(dsn, "tenure-result"))
        if behind_pooler_sync(conn):
            conn.close()
            log.info(_POOLED, describe_dsn(dsn))
            yield None
            return
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except psycopg.Error:
        yield None
        return
    try:
        yield conn
    finally:
        conn.close()


def wait_for_result_sync(
    control: ControlQueries,
    connection: Any,
    job_id: int,
    *,
    timeout: float | None,
    poll: float,
    listen_dsn: str | None,
) -> Any:
    """Blocking `wait_for_result`."""
    _check_wait(timeout, poll)
    deadline = None if timeout is None else time.monotonic() + timeout
    with _listening_sync(listen_dsn, control.results_channel) as listener:
        while True:
            with connection() as conn:
                row = control.result_sync(conn, job_id)
            done, value = settled(row, job_id)
            if done:
                return value
            interval = _interval(poll, listening=listener is not None, row=row)
            wait = interval if deadline is None else min(interval, deadline - time.monotonic())
            if wait <= 0:
                assert timeout is not None
                raise ResultTimeout(job_id, timeout, value)
            if listener is None:
                time.sleep(wait)
                continue
            try:
                for note in listener.notifies(timeout=wait):
                    if note.payload == str(job_id):
                        break
            except psycopg.Error:
                listener = None
