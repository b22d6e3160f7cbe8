"""Tenure's error taxonomy, and the SQLSTATEs that decide retry classes."""

from __future__ import annotations

import psycopg

SERIALIZATION_FAILURE = "40001"
DEADLOCK_DETECTED = "40P01"
LOCK_NOT_AVAILABLE = "55P03"
IN_FAILED_TRANSACTION = "25P02"
QUERY_CANCELED = "57014"

#: SQLSTATEs after which the whole unit of work may simply run again.
RETRYABLE_SQLSTATES = frozenset({SERIALIZATION_FAILURE, DEADLOCK_DETECTED})


class TenureError(Exception):
    """Base class of every error Tenure raises on purpose."""


class ConfigurationError(TenureError):
    """Bad input or configuration; the message names the problem and the fix."""


class ValidationError(ConfigurationError):
    """A job, queue, task or payload was rejected before anything was written."""


class UnknownTask(ValidationError):
    """A job names a task the client's registry does not know, and no queue to send it to."""


class DatabaseUnavailable(TenureError):
    """The database could not be reached."""


class NotReplicated(TenureError):
    """The commit is on the primary, but no synchronous standby is known to have it.

    PostgreSQL said so ("canceling wait for synchronous replication ... might not have been
    replicated"), or, with `require_sync_replication`, no synchronous standby confirmed it. The
    write is NOT undone: `job_ids` are committed on this server and will run if it stays the
    primary; a failover to a standby without them loses them. Do not enqueue them again blindly:
    look them up after the failover (or enqueue with an idempotency key)."""

    def __init__(self, message: str, job_ids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.job_ids = job_ids


class NoSynchronousStandby(DatabaseUnavailable):
    """`require_sync_replication` refused a write before it was made: the primary has no
    synchronous standby now. Nothing was written; write again once it has one."""


class SchemaNotMigrated(TenureError):
    """The Tenure schema is missing or older than this code expects."""


class MigrationFailed(SchemaNotMigrated):
    """A migration's SQL failed; it was not recorded, and the migrations before it stay applied."""

    def __init__(self, version: int, name: str, cause: psycopg.Error, applied: list[int]) -> None:
        first_line, *detail = str(cause).splitlines()
        extra = f" ({' '.join(line.strip() for line in detail)})" if detail else ""
        kept = f"; migrations {applied} were applied before it" if applied else ""
        super().__init__(
            f"migration {version:04d} ({name}) failed: {cause.sqlstate}: {first_line}{extra}{kept}. "
            "Fix the cause (docs/operations.md, 'Upgrading') and run `tenure migrate` again"
        )
        self.version = version
        self.sqlstate = cause.sqlstate


class LeaseLost(TenureError):
    """A fenced write updated no row: another worker holds or has finished this job."""

    def __init__(self, job_id: int, token: int, reason: str = "lease lost") -> None:
        super().__init__(f"job {job_id}: {reason} (token {token})")
        self.job_id = job_id
        self.token = token
        self.reason = reason


class JobFailure(TenureError):
    """Raise from a handler to fail the job with a chosen class and error code."""

    retryable: bool | None = None

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or type(self).__name__.upper()


class Permanent(JobFailure):
    """The job can never succeed as enqueued (bad payload, unsupported version): dead at once."""

    retryable = False


class Transient(JobFailure):
    """A passing problem (timeout, brief outage): retry with backoff within the budget."""

    retryable = True

    def __init__(self, message: str = "", *, code: str | None = None, delay: float | None = None):
        super().__init__(message, code=code)
        self.delay = delay


class TransactionError(TenureError):
    """A unit of work failed inside the transaction runner."""


class Contention(TransactionError):
    """A bounded lock wait ran out (lock_timeout): the rows were busy, not deadlocked."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(f"lock wait timed out: {cause}")
        self.sqlstate = LOCK_NOT_AVAILABLE


class RetriesExhausted(TransactionError):
    """A unit of work kept failing with 40001/40P01 past its retry bound."""

    def __init__(self, attempts: int, last: psycopg.Error) -> None:
        super().__init__(f"gave up after {attempts} attempts: {last.sqlstate}: {last}")
        self.attempts = attempts
        self.sqlstate = last.sqlstate
        self.last = last
