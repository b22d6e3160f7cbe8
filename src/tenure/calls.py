"""A task with its enqueue options bound: `task.with_options(delay=60, conn=conn).enqueue(...)`.

The options live here rather than beside the handler's arguments because a ParamSpec'd
`enqueue(*args: P.args, **kwargs: P.kwargs)` can take no keyword of its own (PEP 612): this way
mypy checks the handler's arguments exactly, and the options separately."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

from psycopg import AsyncConnection, Connection

from tenure.client import JobBuilder
from tenure.errors import ConfigurationError
from tenure.tasks import P

if TYPE_CHECKING:
    from tenure.app import Tenure
    from tenure.jobs import EnqueuedJob
    from tenure.tasks import Task

#: What `with_options` accepts besides `conn`: the options of every enqueue (JobBuilder.spec),
#: read from its signature so the two cannot drift apart.
OPTIONS = tuple(
    name for name in inspect.signature(JobBuilder.spec).parameters if name not in ("self", "task", "payload")
)


@dataclass(frozen=True)
class TaskCall(Generic[P]):
    """What `task.with_options(...)` returns: `enqueue` and `enqueue_sync` take the handler's
    arguments and enqueue with the bound options and connection."""

    task: Task[P, Any]
    conn: AsyncConnection[Any] | Connection[Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"task {self.task.name!r}: unknown enqueue option(s) {', '.join(map(repr, unknown))}; "
                f"the options are {', '.join(OPTIONS)} and conn (the handler's own arguments go "
                "to enqueue)"
            )

    def _app(self) -> Tenure:
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
