"""Tenure's own statements, run the way the bench times them: the claim (by priority, with the
oldest-first share, or within a queue's limits), the fenced completion of a batch, and the
promotion of due jobs. These sections measure the statements themselves, not the runtime around
them, so they call the library's query layer directly."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tenure import ClaimedJob
from tenure.db.queries import Queries
from tenure.lab.bench.server import SCHEMA

OWNER = "bench"
#: The lease and the runtime a claim grants: no claimed job here lives anywhere near either.
LEASE_SECONDS = 60.0
RUNTIME_SECONDS = 600.0


class TenureStatements:
    def __init__(self) -> None:
        self._queries = Queries(SCHEMA)

    async def claim(
        self,
        conn: AsyncConnection[Any],
        queue: str,
        limit: int,
        *,
        owner: str = OWNER,
        oldest: int = 0,
        limited: bool = False,
    ) -> list[ClaimedJob]:
        """Claims up to `limit` jobs of `queue`, `oldest` of them oldest first; `limited`: the
        claim of a queue with limits."""
        return await self._queries.job_claim(
            conn,
            queue=queue,
            owner=owner,
            limit=limit,
            default_lease_seconds=LEASE_SECONDS,
            default_runtime_seconds=RUNTIME_SECONDS,
            oldest=oldest,
            limited=limited,
        )

    async def complete(
        self,
        conn: AsyncConnection[Any],
        jobs: list[ClaimedJob],
        *,
        owner: str = OWNER,
        results: dict[tuple[int, int], Any] | None = None,
    ) -> None:
        leases = [(j.id, j.lease.token) for j in jobs]
        await self._queries.job_complete_many(conn, owner=owner, leases=leases, results=results)

    async def promote_due(self, conn: AsyncConnection[Any], limit: int, now: datetime) -> int:
        """Promotes up to `limit` jobs due at `now`; how many it promoted."""
        return (await self._queries.job_promote_due(conn, limit=limit, now=now)).promoted
