"""Tenure: a durable PostgreSQL job queue with leases and fencing tokens."""

from tenure.app import Tenure
from tenure.client import Client, SyncClient
from tenure.context import JobContext
from tenure.errors import (
    ConfigurationError,
    Contention,
    DatabaseUnavailable,
    JobFailure,
    LeaseLost,
    Permanent,
    RetriesExhausted,
    SchemaNotMigrated,
    TenureError,
    Transient,
    ValidationError,
)
from tenure.jobs import ClaimedJob, EnqueuedJob, Job, JobEvent, JobSpec, JobState, Lease
from tenure.retry import Backoff, FailureClass, FailurePolicy
from tenure.runtime.options import WorkerOptions
from tenure.runtime.worker import Worker
from tenure.tasks import Task, TaskPolicy, TaskRegistry
from tenure.txn import (
    AsyncTransaction,
    SyncTransaction,
    TransactionPolicy,
    run_transaction,
    run_transaction_sync,
)

__all__ = [
    "AsyncTransaction",
    "Backoff",
    "ClaimedJob",
    "Client",
    "ConfigurationError",
    "Contention",
    "DatabaseUnavailable",
    "EnqueuedJob",
    "FailureClass",
    "FailurePolicy",
    "Job",
    "JobContext",
    "JobEvent",
    "JobFailure",
    "JobSpec",
    "JobState",
    "Lease",
    "LeaseLost",
    "Permanent",
    "RetriesExhausted",
    "SchemaNotMigrated",
    "SyncClient",
    "SyncTransaction",
    "Task",
    "TaskPolicy",
    "TaskRegistry",
    "Tenure",
    "TenureError",
    "TransactionPolicy",
    "Transient",
    "ValidationError",
    "Worker",
    "WorkerOptions",
    "run_transaction",
    "run_transaction_sync",
]
