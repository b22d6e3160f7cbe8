"""Tasks: named handlers with a per-task policy, kept in a registry."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import uuid
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    NamedTuple,
    ParamSpec,
    Protocol,
    TypedDict,
    TypeVar,
    Unpack,
)

from psycopg import AsyncConnection, Connection

from tenure.model.conversion import ArgumentCodec, codec_for
from tenure.model.errors import ConfigurationError, ValidationError
from tenure.model.hints import payload_type_errors
from tenure.model.limits import QueueLimit
from tenure.model.outcomes import DEFAULT_MAX_SNOOZES
from tenure.model.retry import Backoff, FailurePolicy
from tenure.model.secrets import SecretResolver
from tenure.model.unique import unique_from
from tenure.model.validation import (
    MAX_ATTEMPTS_LIMIT,
    PRIORITY_RANGE,
    check_queue,
    check_task_name,
)

if TYPE_CHECKING:
    from tenure.handler.context import JobContext
    from tenure.model.jobs import EnqueuedJob
    from tenure.model.schedules import Schedule

Handler = Callable[..., Any]
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class TaskPolicy:
    """Defaults for a task's jobs and how its failures are treated.

    `lease_seconds` and `max_runtime_seconds` of None take the worker's defaults. Numbers are
    checked and normalised here, at registration, so a bad value fails at import time with the
    field named, never later in a claim.
    """

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 20
    backoff: Backoff = field(default_factory=Backoff)
    lease_seconds: float | None = None
    max_runtime_seconds: float | None = None
    failure: FailurePolicy = field(default_factory=FailurePolicy)
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    """How many times one job may snooze (tenure.Snooze) before it goes dead (SNOOZE_LIMIT)."""
    unique: Any = None
    """A tenure.Unique (or True: by the whole payload): the task's jobs are unique by key."""

    def __post_init__(self) -> None:
        check_queue(self.queue)
        _check_int("max_snoozes", self.max_snoozes, 0, 1_000_000, "snoozes before a job is dead")
        if isinstance(self.unique, str):
            raise ConfigurationError(
                "a task's unique= takes a tenure.Unique (fields=..., scope=..., period=...) or True, "
                "not a key string: one key for every job of the task would make it run one at a time; "
                "give a key string at enqueue instead"
            )
        object.__setattr__(self, "unique", unique_from(self.unique))
        _check_int("priority", self.priority, *PRIORITY_RANGE, "higher runs first")
        _check_int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS_LIMIT, "runs before a job is dead")
        for name in ("lease_seconds", "max_runtime_seconds"):
            value = getattr(self, name)
            if value is not None:
                # One type for every task: the claim sends all tasks' leases as one float8 array.
                object.__setattr__(self, name, _seconds(name, value))
        if not isinstance(self.backoff, Backoff):
            raise ConfigurationError(
                f"backoff must be a tenure.Backoff, got {self.backoff!r}; "
                "for example backoff=tenure.Backoff(base=1, cap=300)"
            )
        if not isinstance(self.failure, FailurePolicy):
            raise ConfigurationError(
                f"failure must be a tenure.FailurePolicy, got {self.failure!r}; "
                "for example failure=tenure.FailurePolicy(unknown_budget=5)"
            )


#: The keyword arguments `app.task(...)` takes besides `name`.
class TaskOptions(TypedDict, total=False):
    """A task's policy options, as `app.task(...)`, `app.periodic(...)` and `registry.register(...)`
    take them: the fields of TaskPolicy (a test keeps the two the same). Typed, so that a misspelt
    option (`max_attemps=3`) is a type error, not a task registered without it."""

    queue: str
    priority: int
    max_attempts: int
    backoff: Backoff
    lease_seconds: float | None
    max_runtime_seconds: float | None
    failure: FailurePolicy
    max_snoozes: int
    unique: Any


POLICY_FIELDS = tuple(f.name for f in fields(TaskPolicy))


def _check_int(name: str, value: object, low: int, high: int, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigurationError(f"{name} must be an integer from {low} to {high} ({meaning}), got {value!r}")


def _seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"{name} must be a positive, finite number of seconds (for example 30), got {value!r}; "
            "leave it out to use the worker's setting"
        )
    return float(value)


class _KeywordShape(NamedTuple):
    context: str
    """The handler's first parameter, which the job context fills."""
    required: frozenset[str]
    """Names the payload must hold."""
    allowed: frozenset[str] | None
    """Names the payload may hold; None: any (the handler takes **kwargs)."""


@dataclass(frozen=True)
class Task(Generic[P, R]):
    """A registered handler. Call it through a worker; enqueue it with `task.enqueue(...)` (its
    arguments are the handler's, after the context: checked by mypy and again at enqueue) or
    through the app."""

    name: str
    handler: Callable[Concatenate[JobContext, P], R]
    policy: TaskPolicy
    #: What enqueues its jobs (the app that registered it); None for a bare registry's task.
    app: Enqueuer | None = field(default=None, compare=False, repr=False)

    # Cached: both run for every job, and inspect.signature alone cost ~7% of a no-op job's CPU.
    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    @functools.cached_property
    def codec(self) -> ArgumentCodec | None:
        """How the handler's arguments and result of types JSON lacks (datetime, Decimal, a
        dataclass, ...) go to JSON at enqueue and back at run time; None when every annotation
        is a JSON type, so that such a task's jobs pass through untouched. Built at registration."""
        return codec_for(self.handler)

    @functools.cached_property
    def _signature(self) -> inspect.Signature:
        return inspect.signature(self.handler)

    @functools.cached_property
    def _keywords(self) -> _KeywordShape | None:
        """The payload names the handler takes, when all of them can be passed by keyword;
        None when only binding can tell (a positional-only argument)."""
        params = list(self._signature.parameters.values())
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if not params or params[0].kind not in positional:
            return None
        required: set[str] = set()
        allowed: set[str] | None = set()
        for p in params[1:]:
            if p.kind is inspect.Parameter.POSITIONAL_ONLY:
                return None
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                allowed = None
            elif p.kind is not inspect.Parameter.VAR_POSITIONAL:
                if allowed is not None:
                    allowed.add(p.name)
                if p.default is p.empty:
                    required.add(p.name)
        names = None if allowed is None else frozenset(allowed)
        return _KeywordShape(params[0].name, frozenset(required), names)

    def accepts(
        self, payload: dict[str, Any], *, check_types: bool = True, filled: Collection[str] = ()
    ) -> str | None:
        """Why `payload` cannot be passed as the handler's keyword arguments, or None: a missing
        or unknown argument, or (with `check_types`, as at enqueue) a value whose JSON type the
        handler's annotation rules out. `filled` names arguments the payload will get later (a
        workflow step's input): they must be arguments of the handler, and need no value yet."""
        if filled:
            payload_now, payload = payload, {**payload, **dict.fromkeys(filled)}
        else:
            payload_now = payload
        keywords = self._keywords
        # A payload that fits the handler's keyword names binds; binding (several microseconds,
        # once per job) runs only to word the refusal, or for a handler keywords cannot describe.
        fits = (
            keywords is not None
            and keywords.context not in payload
            and keywords.required <= payload.keys()
            and (keywords.allowed is None or keywords.allowed >= payload.keys())
        )
        if not fits:
            try:
                self._signature.bind(None, **payload)
            except TypeError as exc:
                return str(exc)
        if not check_types:
            return None
        wrong = payload_type_errors(self.handler, payload_now)
        return "; ".join(wrong) if wrong else None

    def takes(self, argument: str) -> bool:
        """Whether the handler has an argument of that name (or takes any, through **kwargs)."""
        params = list(self._signature.parameters.values())[1:]
        return any(
            p.kind is inspect.Parameter.VAR_KEYWORD
            or (p.name == argument and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
            for p in params
        )

    def parameters(self) -> str:
        """The handler's payload arguments as a caller writes them: `order_id, email=...`."""
        shown = []
        for p in list(self._signature.parameters.values())[1:]:
            prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
            shown.append(prefix + p.name + ("=..." if p.default is not p.empty else ""))
        return ", ".join(shown) or "no arguments"

    def payload_of(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The payload a call `task.enqueue(*args, **kwargs)` stands for: each argument under its
        parameter's name, as the worker passes them back."""
        try:
            bound = self._signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise ValidationError(
                f"cannot enqueue task {self.name!r}: {exc}; "
                f"pass the handler's arguments ({self.parameters()})"
            ) from None
        payload: dict[str, Any] = {}
        for name, value in list(bound.arguments.items())[1:]:
            kind = self._signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    raise ValidationError(
                        f"cannot enqueue task {self.name!r}: its *{name} cannot be stored in a payload; "
                        "pass keyword arguments"
                    )
            elif kind is inspect.Parameter.VAR_KEYWORD:
                payload.update(value)
            else:
                payload[name] = value
        return payload

    def bind(self, *args: Any, **kwargs: Any) -> BoundCall:
        """This task with some of its handler's arguments: a workflow step
        (tenure.Workflow.step), whose other arguments the workflow fills, such as the results of
        the steps it waits for."""
        try:
            self._signature.bind_partial(None, *args, **kwargs)
        except TypeError as exc:
            raise ValidationError(
                f"cannot bind task {self.name!r}: {exc}; pass the handler's arguments ({self.parameters()})"
            ) from None
        if args:
            raise ValidationError(
                f"cannot bind task {self.name!r} by position: a step's arguments are stored by name, "
                f"pass keyword arguments ({self.parameters()})"
            )
        return BoundCall(self, dict(kwargs))

    def with_options(
        self, *, conn: AsyncConnection[Any] | Connection[Any] | None = None, **options: Unpack[EnqueueOptions]
    ) -> TaskCall[P]:
        """This task with enqueue options (those of every enqueue: `queue`, `priority`, `delay`,
        `run_at`, `max_attempts`, ..., see ENQUEUE_OPTIONS) and `conn` to enqueue in the
        caller's transaction: `task.with_options(delay=60, conn=conn).enqueue(order_id=7)`."""
        return TaskCall(self, conn, options)

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Enqueues a job of this task with the handler's arguments (after the context)."""
        return await self.with_options().enqueue(*args, **kwargs)

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """`enqueue` for synchronous code: Django views, Flask, scripts."""
        return self.with_options().enqueue_sync(*args, **kwargs)

    def __call__(self, ctx: JobContext, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.handler(ctx, *args, **kwargs)


#: A task of any handler: what registries, workers and clients handle.
AnyTask = Task[..., Any]


@dataclass(frozen=True)
class BoundCall:
    """A task with some of its handler's arguments (`task.bind(...)`): a workflow step to be."""

    task: AnyTask
    payload: dict[str, Any]


class EnqueueOptions(TypedDict, total=False):
    """The options of every enqueue, besides the task, its payload and `conn` (the keywords of
    tenure.producer.client.JobBuilder.spec, which documents each; a test keeps the two the same). Typed,
    so that a misspelt option (`dealy=5`) is a type error, not a job enqueued without its delay."""

    queue: str | None
    priority: int | None
    delay: float | timedelta | None
    run_at: datetime | None
    max_attempts: int | None
    ordering_key: str | None
    result_wanted: bool
    unique: Any
    idempotency_key: uuid.UUID | str | None


#: EnqueueOptions' names, in JobBuilder.spec's order.
ENQUEUE_OPTIONS = tuple(EnqueueOptions.__annotations__)


class Enqueuer(Protocol):
    """What a task needs in order to enqueue its jobs (tenure.Tenure is one): not the whole app."""

    async def enqueue(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        conn: AsyncConnection[Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueuedJob: ...

    def enqueue_sync(
        self,
        task: str | AnyTask,
        payload: dict[str, Any] | None = None,
        *,
        conn: Connection[Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueuedJob: ...


#: A task with its enqueue options bound: `task.with_options(delay=60, conn=conn).enqueue(...)`.
#: The options live here rather than beside the handler's arguments because a ParamSpec'd
#: `enqueue(*args: P.args, **kwargs: P.kwargs)` can take no keyword of its own (PEP 612): this
#: way mypy checks the handler's arguments exactly, and the options separately.
@dataclass(frozen=True)
class TaskCall(Generic[P]):
    """What `task.with_options(...)` returns: `enqueue` and `enqueue_sync` take the handler's
    arguments and enqueue with the bound options and connection."""

    task: Task[P, Any]
    conn: AsyncConnection[Any] | Connection[Any] | None = None
    options: EnqueueOptions = field(default_factory=lambda: EnqueueOptions())

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(ENQUEUE_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"task {self.task.name!r}: unknown enqueue option(s) {', '.join(map(repr, unknown))}; "
                f"the options are {', '.join(ENQUEUE_OPTIONS)} and conn (the handler's own arguments go "
                "to enqueue)"
            )

    def _app(self) -> Enqueuer:
        if self.task.app is None:
            raise ConfigurationError(
                f"task {self.task.name!r} was not registered through an app (@app.task), so it has "
                "no client to enqueue with: use app.enqueue or a Client"
            )
        return self.task.app

    async def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Enqueues one job; inside `conn`'s transaction when one was given."""
        if isinstance(self.conn, Connection):
            raise ConfigurationError(
                "conn is a synchronous psycopg Connection: use enqueue_sync with it, or pass an "
                "AsyncConnection to enqueue"
            )
        payload = self.task.payload_of(*args, **kwargs)
        return await self._app().enqueue(self.task, payload, conn=self.conn, **self.options)

    def enqueue_sync(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Enqueues one job from synchronous code; inside `conn`'s transaction when one was given."""
        if isinstance(self.conn, AsyncConnection):
            raise ConfigurationError(
                "conn is an AsyncConnection: await enqueue with it, or pass a synchronous psycopg "
                "Connection to enqueue_sync"
            )
        payload = self.task.payload_of(*args, **kwargs)
        return self._app().enqueue_sync(self.task, payload, conn=self.conn, **self.options)


def _policy(task_name: str, options: dict[str, Any]) -> TaskPolicy:
    unknown = sorted(set(options) - set(POLICY_FIELDS))
    if unknown:
        raise ConfigurationError(
            f"task {task_name!r}: unknown policy option(s) {', '.join(map(repr, unknown))}; "
            f"the options are {', '.join(POLICY_FIELDS)}"
        )
    try:
        return TaskPolicy(**options)
    except ConfigurationError as exc:
        raise type(exc)(f"task {task_name!r}: {exc}") from None


class MainModuleTask(UserWarning):
    """A task registered by a module run as a script: it is named `__main__.f`, which no worker
    started as `tenure worker MODULE` has (there the module has its own name), so its jobs would
    wait for ever."""

    def __init__(self, task_name: str, function: str) -> None:
        super().__init__(
            f"task {task_name!r} is registered by a script run as __main__, so no worker that imports "
            f"the module by its name (`tenure worker MODULE`) has a task of that name, and its jobs "
            f"would stay pending: define the tasks in a module that both the script and the worker "
            f"import, or give the task a name that does not depend on it (@app.task(name='shop.{function}'))"
        )


class TaskRegistry:
    """Task names to tasks. A worker runs the tasks of its registry."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task[..., Any]] = {}
        #: Turns `tenure.secret(name)` payload references into values at run time.
        self.secret_resolver: SecretResolver | None = None
        #: Global limits this app declares, by queue; its workers write them at start.
        self.limits: dict[str, QueueLimit] = {}
        #: The periodic jobs this app declares, by schedule name; its workers fire them.
        self.schedules: dict[str, Schedule] = {}

    def register(
        self,
        handler: Callable[Concatenate[JobContext, P], R],
        *,
        name: str | None = None,
        app: Enqueuer | None = None,
        **policy: Unpack[TaskOptions],
    ) -> Task[P, R]:
        """Registers `handler` under `name` (default: its module and qualified name); `policy`
        takes the fields of `TaskPolicy`. What `app.task` does."""
        task_name = check_task_name(name or f"{handler.__module__}.{handler.__qualname__}")
        if name is None and handler.__module__ == "__main__":
            warnings.warn(MainModuleTask(task_name, handler.__qualname__), stacklevel=3)
        if task_name in self._tasks and self._tasks[task_name].handler is not handler:
            raise ConfigurationError(f"task {task_name!r} is registered twice; give one of them another name")
        params = list(inspect.signature(handler).parameters.values())
        if not params or params[0].kind not in (
            params[0].POSITIONAL_ONLY,
            params[0].POSITIONAL_OR_KEYWORD,
        ):
            raise ConfigurationError(
                f"task {task_name!r}: the handler must take the job context as its first positional "
                "argument, e.g. `def handler(ctx, **payload)`"
            )
        task = Task(task_name, handler, _policy(task_name, dict(policy)), app)
        task.codec  # noqa: B018 - built now, once, rather than on the first job
        self._tasks[task_name] = task
        return task

    def add_schedule(self, schedule: Schedule) -> Schedule:
        """Adds a periodic job; declaring one name twice for different schedules is refused."""
        known = self.schedules.get(schedule.name)
        if known is not None and known != schedule:
            raise ConfigurationError(
                f"schedule {schedule.name!r} is declared twice (for task {known.task!r} at "
                f"{known.cron!r} and for task {schedule.task!r} at {schedule.cron!r}); "
                "give one of them another name="
            )
        self.schedules[schedule.name] = schedule
        return schedule

    def get(self, name: str) -> Task[..., Any] | None:
        """The task registered as `name`, or None."""
        return self._tasks.get(name)

    def with_policy(self, name: str, **changes: Unpack[TaskOptions]) -> Task[..., Any]:
        """Replaces task `name` with a copy whose policy has `changes`, and returns it."""
        task = self._tasks[name]
        options = {f: getattr(task.policy, f) for f in POLICY_FIELDS}
        self._tasks[name] = replace(task, policy=_policy(name, {**options, **changes}))
        return self._tasks[name]

    def __iter__(self) -> Iterator[Task[..., Any]]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def queues(self) -> list[str]:
        """The queues of the registered tasks, sorted."""
        return sorted({t.policy.queue for t in self._tasks.values()})
