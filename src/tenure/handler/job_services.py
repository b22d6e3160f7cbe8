"""What a running job's handler reaches of the worker that runs it: the statements, the pools,
the worker's identity and loop, and where a fencing loss is recorded. The worker's services
provide it; the handler's side (JobContext, effects) knows this and nothing else of the worker."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from tenure.db.queries import Queries
from tenure.model.jobs import ClaimedJob


class JobServices(Protocol):
    @property
    def queries(self) -> Queries: ...

    @property
    def owner(self) -> str: ...

    @property
    def pool(self) -> AsyncConnectionPool[Any]: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def require_sync_replication(self) -> bool:
        """Whether a completion counts only once a synchronous standby confirmed it."""
        ...

    def sync_pool(self) -> ConnectionPool[Any]:
        """A blocking pool for thread handlers' transactions."""
        ...

    async def record_fencing_loss(self, job: ClaimedJob, code: str) -> None: ...

    def record_fencing_loss_threadsafe(self, job: ClaimedJob, code: str) -> None: ...
