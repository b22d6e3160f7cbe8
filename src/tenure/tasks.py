"""Tasks: named handlers with a per-task policy, kept in a registry."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tenure.errors import ConfigurationError
from tenure.retry import Backoff, FailurePolicy
from tenure.secrets import SecretResolver
from tenure.validation import check_queue, check_task_name

if TYPE_CHECKING:
    from tenure.context import JobContext

Handler = Callable[..., Any]


@dataclass(frozen=True)
class TaskPolicy:
    """Defaults for a task's jobs and how its failures are treated.

    `lease_seconds` and `max_runtime_seconds` of None take the worker's defaults.
    """

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 20
    backoff: Backoff = field(default_factory=Backoff)
    lease_seconds: float | None = None
    max_runtime_seconds: float | None = None
    failure: FailurePolicy = field(default_factory=FailurePolicy)

    def __post_init__(self) -> None:
        check_queue(self.queue)
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        for name in ("lease_seconds", "max_runtime_seconds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(frozen=True)
class Task:
    """A registered handler. Call it through a worker; enqueue it through the app."""

    name: str
    handler: Handler
    policy: TaskPolicy

    # Cached: both run for every job, and inspect.signature alone cost ~7% of a no-op job's CPU.
    @functools.cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    @functools.cached_property
    def _signature(self) -> inspect.Signature:
        return inspect.signature(self.handler)

    def accepts(self, payload: dict[str, Any]) -> str | None:
        """Why `payload` cannot be passed as the handler's keyword arguments, or None."""
        try:
            self._signature.bind(None, **payload)
        except TypeError as exc:
            return str(exc)
        return None

    def __call__(self, ctx: JobContext, **payload: Any) -> Any:
        return self.handler(ctx, **payload)


class TaskRegistry:
    """Task names to tasks. A worker runs the tasks of its registry."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        #: Turns `tenure.secret(name)` payload references into values at run time (E4).
        self.secret_resolver: SecretResolver | None = None

    def register(self, handler: Handler, *, name: str | None = None, **policy: Any) -> Task:
        task_name = check_task_name(name or f"{handler.__module__}.{handler.__qualname__}")
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
        task = Task(task_name, handler, TaskPolicy(**policy))
        self._tasks[task_name] = task
        return task

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def with_policy(self, name: str, **changes: Any) -> Task:
        task = self._tasks[name]
        self._tasks[name] = replace(task, policy=replace(task.policy, **changes))
        return self._tasks[name]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def queues(self) -> list[str]:
        return sorted({t.policy.queue for t in self._tasks.values()})
