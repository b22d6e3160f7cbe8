"""What a handler runs in its own transaction (ctx.atomic): the job's fenced completion beside its
work, and the session reset after it. The worker's completer writes completions with the same
statement. Written once, async; tools/async_to_sync.py writes its blocking twin
(tenure.db.sync.handler_queries), which thread handlers run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.arrays import bigint_array
from tenure.db.channels import results_channel
from tenure.db.fetch import fetch
from tenure.db.sqlfiles import named_queries

ASYNC = True


def result_json(result: Any) -> Jsonb | None:
    """None stores no result (SQL NULL); a Jsonb as given (Jsonb(None) is JSON null)."""
    if result is None or isinstance(result, Jsonb):
        return result
    return Jsonb(result)


class HandlerQueries:
    """Typed access to the handler's named queries of one Tenure schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.results_channel = results_channel(schema)
        self._sql = named_queries(schema)

    def _complete_params(
        self,
        owner: str,
        leases: Sequence[tuple[int, int]],
        now: datetime | None,
        results: Mapping[tuple[int, int], Any] | None = None,
        notify_results: bool = True,
        repeat_is_done: bool = True,
    ) -> dict[str, Any]:
        ordered = sorted(leases)  # one lock order for every writer
        found = results or {}
        return {
            "ids": bigint_array(i for i, _ in ordered),
            "tokens": bigint_array(t for _, t in ordered),
            # NULL when no job has a result (the usual case): each job's is then NULL, and no
            # array of nulls is built and sent.
            "results": [result_json(found.get(lease)) for lease in ordered] if found else None,
            "results_channel": self.results_channel,
            "notify_results": notify_results,
            "repeat_is_done": repeat_is_done,
            "owner": owner,
            "now": now,
        }

    async def job_complete_many(
        self,
        conn: AsyncConnection[Any],
        *,
        owner: str,
        leases: Sequence[tuple[int, int]],
        results: Mapping[tuple[int, int], Any] | None = None,
        notify_results: bool = True,
        repeat_is_done: bool = True,
        now: datetime | None = None,
    ) -> dict[tuple[int, int], str]:
        """Fenced success for (job id, token) pairs: each pair's outcome, 'done', 'busy' (locked
        elsewhere, try again) or 'lost' (the fence did not hold). `results` holds each job's
        result (JSON, already checked; absent or None: none; Jsonb(None): JSON null). A job
        that already succeeded under the token is 'done' (a repeat after a lost reply) unless
        `repeat_is_done` is false (ctx.atomic, whose work must not commit beside it): 'lost'."""
        params = self._complete_params(owner, leases, now, results, notify_results, repeat_is_done)
        async with conn.cursor() as cur:
            await cur.execute(self._sql["job_complete_many"], params)
            outcomes = {(job_id, token): "done" for job_id, token in await cur.fetchall()}
            if len(outcomes) < len(leases):
                # Usually none are left: a row locked elsewhere, a lease lost, a repeat.
                rest = sorted(lease for lease in leases if lease not in outcomes)
                params["ids"] = bigint_array(i for i, _ in rest)
                params["tokens"] = bigint_array(t for _, t in rest)
                await cur.execute(self._sql["job_complete_unsettled"], params)
                outcomes |= {(job_id, token): outcome for job_id, token, outcome in await cur.fetchall()}
            return outcomes

    async def session_reset(self, conn: AsyncConnection[Any]) -> None:
        """Undoes session settings a handler's unit of work may have made (SET ...)."""
        await fetch(conn, self._sql["session_reset"], {})
