"""`Tenure`: one object that holds the settings, the task registry and the clients."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypedDict, TypeVar, Unpack, overload

from tenure.db.connect import connect, resolve_dsn
from tenure.db.migrate import MigrationReport, migrate
from tenure.db.replication import sync_required
from tenure.model.errors import ConfigurationError
from tenure.model.limits import QueueLimit
from tenure.model.schedules import Schedule, declare_schedule
from tenure.model.secrets import CredentialPolicy, SecretResolver, check_credentials, credential_policy_from
from tenure.model.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_schema_name
from tenure.producer.client import Client
from tenure.producer.sync_client import SyncClient
from tenure.tasks import AnyTask, Handler, P, R, Task, TaskOptions, TaskRegistry

if TYPE_CHECKING:
    from tenure.handler.context import JobContext
    from tenure.worker.options import WorkerOptions
    from tenure.worker.worker import Worker


V = ParamSpec("V")
W = ParamSpec("W")
T = TypeVar("T")
U = TypeVar("U")


def _async_verb(verb: Callable[Concatenate[Client, V], T]) -> Callable[Concatenate[Tenure, V], T]:
    """`app.verb(...)` is `app.client.verb(...)`: the client's signature, checked by mypy, and
    its docs, written once on the client."""

    @functools.wraps(verb)
    def on_app(app: Tenure, /, *args: V.args, **kwargs: V.kwargs) -> T:
        return verb(app.client, *args, **kwargs)

    return on_app


def _blocking_verb(verb: Callable[Concatenate[SyncClient, V], T]) -> Callable[Concatenate[Tenure, V], T]:
    """`app.verb_sync(...)` is `app.sync_client.verb(...)`, as `_async_verb`."""

    @functools.wraps(verb)
    def on_app(app: Tenure, /, *args: V.args, **kwargs: V.kwargs) -> T:
        return verb(app.sync_client, *args, **kwargs)

    return on_app


def _verbs(
    verb: Callable[Concatenate[Client, V], T], blocking: Callable[Concatenate[SyncClient, W], U]
) -> tuple[Callable[Concatenate[Tenure, V], T], Callable[Concatenate[Tenure, W], U]]:
    """A verb of the clients as the app's pair, `app.verb` and its blocking twin `app.verb_sync`:
    declared together, so that no verb of the app goes without its twin."""
    return _async_verb(verb), _blocking_verb(blocking)


class ClientOptions(TypedDict):
    """What the app hands both of its clients."""

    schema: str
    registry: TaskRegistry
    max_payload_bytes: int
    credential_policy: CredentialPolicy
    require_sync_replication: bool


class Tenure:
    """The application: register tasks, enqueue jobs, run workers.

    With no `dsn`, $TENURE_DSN is used, and with neither the embedded PostgreSQL.
    `require_sync_replication` (None: $TENURE_REQUIRE_SYNC_REPLICATION) makes both clients
    acknowledge an enqueue only once a synchronous standby has it (docs/guarantees.md).
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "tenure",
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        credential_policy: CredentialPolicy | str = CredentialPolicy.WARN,
        require_sync_replication: bool | None = None,
    ) -> None:
        self.dsn = dsn
        self.require_sync_replication = sync_required(require_sync_replication)
        self.schema = check_schema_name(schema)
        self.max_payload_bytes = max_payload_bytes
        self.credential_policy = credential_policy_from(credential_policy)
        self.registry = TaskRegistry()
        self._client: Client | None = None
        self._sync_client: SyncClient | None = None

    @overload
    def task(
        self,
        handler: Callable[Concatenate[JobContext, P], R],
        /,
        *,
        name: str | None = None,
        **policy: Unpack[TaskOptions],
    ) -> Task[P, R]: ...

    @overload
    def task(
        self, handler: None = None, /, *, name: str | None = None, **policy: Unpack[TaskOptions]
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], Task[P, R]]: ...

    def task(
        self, handler: Handler | None = None, /, *, name: str | None = None, **policy: Unpack[TaskOptions]
    ) -> Any:
        """Registers a handler `(ctx, **payload)`. Policy: queue, priority, max_attempts, backoff,
        lease_seconds, max_runtime_seconds, failure. Returns the Task, whose `enqueue(...)` takes
        the handler's own arguments."""

        def register(fn: Handler) -> Task[..., Any]:
            return self.registry.register(fn, name=name, app=self, **policy)

        return register(handler) if handler is not None else register

    def limit(
        self,
        queue: str,
        *,
        max_running: int | None = None,
        key: str | None = None,
        max_running_per_key: int | None = None,
        rate: int | None = None,
        per: float = 1.0,
    ) -> QueueLimit:
        """Limits `queue` across every worker: at most `max_running` of its jobs running, at
        most `max_running_per_key` per value of payload field `key`, at most `rate` starts per
        `per` seconds. Workers of this app write it to the database when they start."""
        declared = QueueLimit(queue, max_running, key, max_running_per_key, rate, per)
        self.registry.limits[queue] = declared
        return declared

    def periodic(
        self,
        cron: str,
        /,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        missed: Any = "latest",
        **policy: Unpack[TaskOptions],
    ) -> Any:
        """Registers a handler as a task (as `task` does, with its policy options) and a schedule
        that enqueues it at every slot of `cron` (5 fields, or 6 with seconds first) read in
        `timezone`. `name` names both the task and the schedule. `missed`: what runs of the slots
        no worker was up for, 'skip', 'latest' (the default) or ('backfill', N); docs/schedules.md."""

        def register(fn: Handler) -> AnyTask:
            task = self.registry.register(fn, name=name, app=self, **policy)
            self.schedule(task, cron, name=name, timezone=timezone, payload=payload, missed=missed)
            return task

        return register

    def schedule(
        self,
        task: str | AnyTask,
        cron: str,
        *,
        name: str | None = None,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        missed: Any = "latest",
    ) -> Schedule:
        """Schedules a registered task at every slot of `cron` (see `periodic`). `name` defaults to
        the task's name; give each further schedule of one task its own."""
        task_name = task.name if isinstance(task, Task) else task
        known = self.registry.get(task_name) if isinstance(task_name, str) else None
        if known is None:
            raise ConfigurationError(
                f"cannot schedule task {task_name!r}: this app has no such task; register it with "
                "@app.task first (or declare handler and schedule at once with @app.periodic)"
            )
        declared = declare_schedule(
            known,
            cron,
            name=name,
            timezone=timezone,
            payload=payload,
            missed=missed,
            max_payload_bytes=self.max_payload_bytes,
        )
        check_credentials(declared.payload, self.credential_policy)
        return self.registry.add_schedule(declared)

    def secret_resolver(self, resolver: SecretResolver) -> SecretResolver:
        """Registers how workers turn `tenure.secret(name)` references into values.

        Usable as a decorator. The resolver takes the secret's name and returns its value (or an
        awaitable of it); the value reaches the handler only, never the database or the logs.
        """
        self.registry.secret_resolver = resolver
        return resolver

    def resolved_dsn(self) -> str:
        """The database this app uses: its `dsn`, else $TENURE_DSN, else the embedded server
        (started if needed). Connect with it to enqueue inside your own transactions."""
        return resolve_dsn(self.dsn).dsn

    @property
    def client(self) -> Client:
        """The app's async `Client`, with its registry; opened on first use."""
        if self._client is None:
            self._client = Client(self.dsn, **self._client_options())
        return self._client

    @property
    def sync_client(self) -> SyncClient:
        """The app's blocking `SyncClient`, with its registry; opened on first use."""
        if self._sync_client is None:
            self._sync_client = SyncClient(self.dsn, **self._client_options())
        return self._sync_client

    def _client_options(self) -> ClientOptions:
        """What both clients take from the app, so the two can never be set up differently."""
        return ClientOptions(
            schema=self.schema,
            registry=self.registry,
            max_payload_bytes=self.max_payload_bytes,
            credential_policy=self.credential_policy,
            require_sync_replication=self.require_sync_replication,
        )

    # -- enqueue, job control and workflows: the clients' own verbs, with their signatures and
    # docs, each with its blocking twin ------------------------------------------------------------

    enqueue, enqueue_sync = _verbs(Client.enqueue, SyncClient.enqueue)
    cancel, cancel_sync = _verbs(Client.cancel, SyncClient.cancel)
    retry, retry_sync = _verbs(Client.retry, SyncClient.retry)
    pause_queue, pause_queue_sync = _verbs(Client.pause_queue, SyncClient.pause_queue)
    resume_queue, resume_queue_sync = _verbs(Client.resume_queue, SyncClient.resume_queue)
    paused_queues, paused_queues_sync = _verbs(Client.paused_queues, SyncClient.paused_queues)
    result, result_sync = _verbs(Client.result, SyncClient.result)
    enqueue_workflow, enqueue_workflow_sync = _verbs(Client.enqueue_workflow, SyncClient.enqueue_workflow)
    list_workflows, list_workflows_sync = _verbs(Client.list_workflows, SyncClient.list_workflows)
    get_workflow, get_workflow_sync = _verbs(Client.get_workflow, SyncClient.get_workflow)
    workflow_steps, workflow_steps_sync = _verbs(Client.workflow_steps, SyncClient.workflow_steps)
    cancel_workflow, cancel_workflow_sync = _verbs(Client.cancel_workflow, SyncClient.cancel_workflow)
    retry_workflow, retry_workflow_sync = _verbs(Client.retry_workflow, SyncClient.retry_workflow)
    signal, signal_sync = _verbs(Client.signal, SyncClient.signal)
    end_wait, end_wait_sync = _verbs(Client.end_wait, SyncClient.end_wait)
    list_waiting, list_waiting_sync = _verbs(Client.list_waiting, SyncClient.list_waiting)
    job_waits, job_waits_sync = _verbs(Client.job_waits, SyncClient.job_waits)
    published, published_sync = _verbs(Client.published, SyncClient.published)
    workflow_published, workflow_published_sync = _verbs(
        Client.workflow_published, SyncClient.workflow_published
    )

    async def migrate(self) -> MigrationReport:
        """Creates or upgrades the app's schema, as `tenure migrate` does."""
        conn = await connect(resolve_dsn(self.dsn).dsn)
        async with conn:
            return await migrate(conn, self.schema)

    def worker(self, options: WorkerOptions | None = None, **option_fields: Any) -> Worker:
        """A worker for this app's tasks, with `options` or `WorkerOptions(**option_fields)`."""
        # Imported here: a web process that only enqueues never loads the worker's runtime.
        from tenure.worker.options import WorkerOptions
        from tenure.worker.worker import Worker

        opts = options or WorkerOptions(**option_fields)
        if self.require_sync_replication and not opts.require_sync_replication:
            # The app's own setting holds for its workers too; a worker can only add to it.
            opts = dataclasses.replace(opts, require_sync_replication=True)
        return Worker(self.registry, dsn=self.dsn, schema=self.schema, options=opts)

    async def close(self) -> None:
        """Closes the app's clients' pools."""
        if self._client is not None:
            await self._client.close()
        self.close_sync()

    def close_sync(self) -> None:
        """Closes the synchronous client's pool, for code with no event loop (the async client,
        if one was opened, needs `await close()`)."""
        if self._sync_client is not None:
            self._sync_client.close()
