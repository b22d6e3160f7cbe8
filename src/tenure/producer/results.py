"""Waiting for a job's result: what a waiter decides (tenure.producer.result_wait waits).

A waiter reads the job, and while it is unfinished waits for a notification on the results
channel (`result_wanted` jobs send one when they finish) or for its poll interval, then reads
again. Jobs nobody waits for send no notification; a waiter for such a job, or one whose
LISTEN cannot work, simply polls at its poll interval. A LISTEN through a transaction pooler
(PgBouncer) is taken, and never heard: the waiter finds out that its listening connection goes
through one before it relies on it, and polls instead.
"""

from __future__ import annotations

import logging
from typing import Any

from tenure.db.control_rows import JobResultRow
from tenure.model.errors import TenureError, ValidationError
from tenure.tasks import TaskRegistry

log = logging.getLogger("tenure.client")

#: How long after its success a waited-for job's result may still be on its way (its handler
#: completed in its own transaction; the worker stores the result right after): past this the
#: worker is presumed gone, and the job has no result.
RESULT_GRACE_SECONDS = 10.0
#: Said (at INFO) when a waiter's listening connection turns out to go through a pooler.
POOLED_LISTENER = (
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


def settled(
    row: JobResultRow | None, job_id: int, step: str | None = None, registry: TaskRegistry | None = None
) -> tuple[bool, Any]:
    """(True, result) for a succeeded job, (False, state) for an unfinished one; raises
    JobFailed for a dead or cancelled one. `step`: the state of the workflow step the id was
    drawn for, while its job does not exist yet (waiting and held wait; cancelled fails). A
    result of a task `registry` knows comes back as its handler's return annotation says."""
    if row is None:
        if step == "cancelled":
            raise JobFailed(job_id, "cancelled", "CANCELLED", "its workflow step was cancelled before it ran")
        if step is not None:
            return False, f"a workflow step {step} for the steps before it"
        raise ValidationError(f"there is no job {job_id}")
    state = row.state
    if state == "succeeded":
        if row.result_pending and (row.finished_seconds_ago or 0.0) < RESULT_GRACE_SECONDS:
            return False, "succeeded, its result on its way"
        return True, typed_result(registry, row, job_id)
    if state in ("dead", "cancelled"):
        raise JobFailed(job_id, state, row.last_error_code, row.last_error)
    return False, state


def typed_result(registry: TaskRegistry | None, row: JobResultRow, job_id: int) -> Any:
    """The stored result as its task's return annotation says (a Decimal, a dataclass...), when
    the task is known here; the JSON as stored otherwise."""
    task = registry.get(row.task) if registry is not None else None
    if task is None or task.codec is None or task.codec.result is None:
        return row.result
    try:
        return task.codec.decode_result(row.result)
    except ValidationError as exc:
        raise ValidationError(
            f"job {job_id} succeeded, but its result does not fit task {row.task!r}: {exc} "
            "(was the handler's return annotation changed since it ran?)"
        ) from None


def wait_interval(poll: float, *, listening: bool, row: JobResultRow | None) -> float:
    """How long to wait before reading the job again: a job that notifies when it finishes is
    read only now and then in case a notification was lost; any other is polled."""
    if listening and row is not None and row.result_wanted:
        return poll * LISTENING_POLL_FACTOR
    return poll


def check_wait(timeout: float | None, poll: float) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0
    ):
        raise ValidationError(f"timeout must be seconds >= 0 or None (wait for ever), got {timeout!r}")
    if isinstance(poll, bool) or not isinstance(poll, int | float) or poll <= 0:
        raise ValidationError(f"poll must be a positive number of seconds, got {poll!r}")
