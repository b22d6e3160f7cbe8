"""Tenure: a durable PostgreSQL job queue with leases and fencing tokens."""

import importlib
from typing import TYPE_CHECKING, Any

from tenure.app import Tenure
from tenure.db.replication import watch_commits
from tenure.handler.context import JobContext
from tenure.handler.effects import Confirmed, EffectRecord, EffectUncertain, NotHappened, RetryLater
from tenure.handler.sync_transaction import SyncTransaction, run_transaction_sync
from tenure.handler.transaction import AsyncTransaction, run_transaction
from tenure.handler.txn import TransactionPolicy
from tenure.model.conditions import Elapsed, Signalled
from tenure.model.errors import (
    ConfigurationError,
    Contention,
    DatabaseUnavailable,
    JobFailure,
    LeaseLost,
    MigrationFailed,
    NoSynchronousStandby,
    NotReplicated,
    Permanent,
    RetriesExhausted,
    SchemaNotMigrated,
    TenureError,
    Transient,
    UnknownTask,
    ValidationError,
)
from tenure.model.jobs import ClaimedJob, EnqueuedJob, Job, JobEvent, JobSpec, JobState, Lease
from tenure.model.outcomes import ResultRefused, Snooze
from tenure.model.retry import Backoff, FailureClass, FailurePolicy
from tenure.model.secrets import (
    CredentialInPayloadWarning,
    CredentialPolicy,
    SecretValue,
    resolve_secrets,
    secret,
)
from tenure.model.unique import Unique
from tenure.model.waits import Published, SignalSent, Waiting, WaitRecord, WaitResult, WaitStarted
from tenure.model.workflows import EnqueuedWorkflow, WorkflowStep, WorkflowSummary
from tenure.producer.client import Client
from tenure.producer.control import CancelReport, ControlRefused, NothingMatched, QueuePause, TooManyMatched
from tenure.producer.results import JobFailed, ResultTimeout
from tenure.producer.sync_client import SyncClient
from tenure.producer.workflow import Step, Workflow, chain, fan_in
from tenure.tasks import EnqueueOptions, Task, TaskOptions, TaskPolicy, TaskRegistry

# The errors a user imports from `tenure` read as such wherever Python names them (a job's
# stored traceback, JobFailed's message, a refusal at the prompt): `tenure.Permanent`, not the
# module that happens to define it.
for _error in (
    ConfigurationError,
    Contention,
    ControlRefused,
    DatabaseUnavailable,
    EffectUncertain,
    JobFailed,
    JobFailure,
    LeaseLost,
    MigrationFailed,
    NothingMatched,
    Permanent,
    ResultRefused,
    ResultTimeout,
    RetriesExhausted,
    SchemaNotMigrated,
    Snooze,
    TenureError,
    TooManyMatched,
    Transient,
    UnknownTask,
    ValidationError,
    WaitStarted,
):
    _error.__module__ = "tenure"
del _error

if TYPE_CHECKING:
    from tenure.worker.options import WorkerOptions
    from tenure.worker.worker import Worker

#: Public names of the worker's runtime, imported on first use: `import tenure` in a web process
#: that only enqueues loads no worker module.
_LAZY = {"Worker": "tenure.worker.worker", "WorkerOptions": "tenure.worker.options"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name == "testing":  # tenure.testing, for an application's tests: it loads the worker
        return importlib.import_module("tenure.testing")
    raise AttributeError(f"module 'tenure' has no attribute {name!r}")


__all__ = [
    "AsyncTransaction",
    "Backoff",
    "CancelReport",
    "ClaimedJob",
    "Client",
    "ConfigurationError",
    "Confirmed",
    "Contention",
    "ControlRefused",
    "CredentialInPayloadWarning",
    "CredentialPolicy",
    "DatabaseUnavailable",
    "EffectRecord",
    "EffectUncertain",
    "Elapsed",
    "EnqueueOptions",
    "EnqueuedJob",
    "EnqueuedWorkflow",
    "FailureClass",
    "FailurePolicy",
    "Job",
    "JobContext",
    "JobEvent",
    "JobFailed",
    "JobFailure",
    "JobSpec",
    "JobState",
    "Lease",
    "LeaseLost",
    "MigrationFailed",
    "NoSynchronousStandby",
    "NotHappened",
    "NotReplicated",
    "NothingMatched",
    "Permanent",
    "Published",
    "QueuePause",
    "ResultRefused",
    "ResultTimeout",
    "RetriesExhausted",
    "RetryLater",
    "SchemaNotMigrated",
    "SecretValue",
    "SignalSent",
    "Signalled",
    "Snooze",
    "Step",
    "SyncClient",
    "SyncTransaction",
    "Task",
    "TaskOptions",
    "TaskPolicy",
    "TaskRegistry",
    "Tenure",
    "TenureError",
    "TooManyMatched",
    "TransactionPolicy",
    "Transient",
    "Unique",
    "UnknownTask",
    "ValidationError",
    "WaitRecord",
    "WaitResult",
    "WaitStarted",
    "Waiting",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "WorkflowStep",
    "WorkflowSummary",
    "chain",
    "fan_in",
    "resolve_secrets",
    "run_transaction",
    "run_transaction_sync",
    "secret",
    "watch_commits",
]
