"""Typed access to the soak's named queries (sql/soak.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from tenure import SyncTransaction
from tenure.db.sqlfiles import package_queries

Row = dict[str, Any]
#: The task of the rows the soak's faults inject (app.Kind.INJECTED): not the workload's jobs, so
#: left out of its accounting and judged by their own check.
INJECTED_TASK = "soak.injected"


class SoakQueries:
    def __init__(self, schema: str) -> None:
        self._sql = package_queries("tenure.lab.soak", schema)

    async def _rows(self, conn: AsyncConnection[Any], name: str, params: Row | None = None) -> list[Row]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(self._sql[name], params or {})
            return await cur.fetchall() if cur.description else []

    async def terminate_worker(self, conn: AsyncConnection[Any], owner: str) -> int:
        return int((await self._rows(conn, "soak_terminate_worker", {"owner": owner}))[0]["terminated"])

    async def snapshot_open(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_snapshot_open"))[0]

    async def progress(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_progress", {"injected": INJECTED_TASK}))[0]

    async def leases_outstanding(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_leases_outstanding"))[0]

    async def outcomes(self, conn: AsyncConnection[Any]) -> list[Row]:
        return await self._rows(conn, "soak_outcomes", {"injected": INJECTED_TASK})

    async def handed(self, conn: AsyncConnection[Any]) -> int:
        """The workload's jobs whose last attempt came from a worker's offer (soak_handed)."""
        return int((await self._rows(conn, "soak_handed", {"injected": INJECTED_TASK}))[0]["jobs"])

    async def missing(self, conn: AsyncConnection[Any], ids: Sequence[int]) -> list[int]:
        """The acknowledged jobs among `ids` that are not stored."""
        return [int(r["id"]) for r in await self._rows(conn, "soak_missing", {"ids": list(ids)})]

    async def events(self, conn: AsyncConnection[Any]) -> list[Row]:
        return await self._rows(conn, "soak_events")

    async def error_codes(self, conn: AsyncConnection[Any]) -> dict[str, int]:
        return {r["code"]: int(r["n"]) for r in await self._rows(conn, "soak_error_codes")}

    async def lock_running_jobs(self, conn: AsyncConnection[Any], limit: int) -> list[int]:
        return [r["id"] for r in await self._rows(conn, "soak_lock_running_jobs", {"limit": limit})]

    async def terminate_workers(self, conn: AsyncConnection[Any], prefix: str) -> int:
        rows = await self._rows(conn, "soak_terminate_workers", {"prefix": prefix + "%"})
        return int(rows[0]["terminated"])

    async def running_sample(self, conn: AsyncConnection[Any], limit: int) -> list[Row]:
        return await self._rows(conn, "soak_running_sample", {"limit": limit})

    async def claims_since(self, conn: AsyncConnection[Any], queue: str, since: Any) -> int:
        return int(
            (await self._rows(conn, "soak_claims_since", {"queue": queue, "since": since}))[0]["claims"]
        )

    async def snooze_results(self, conn: AsyncConnection[Any], tasks: Sequence[str]) -> list[Row]:
        return await self._rows(conn, "soak_snooze_results", {"tasks": list(tasks)})

    async def wait_results(self, conn: AsyncConnection[Any], tasks: Sequence[str]) -> list[Row]:
        return await self._rows(conn, "soak_wait_results", {"tasks": list(tasks)})

    async def limited_live(self, conn: AsyncConnection[Any], queue: str) -> int:
        return int((await self._rows(conn, "soak_limited_live", {"queue": queue}))[0]["live"])

    async def schedule_fires(self, conn: AsyncConnection[Any], schedule: str) -> Row:
        return (await self._rows(conn, "soak_schedule_fires", {"schedule": schedule}))[0]

    async def any_succeeded(self, conn: AsyncConnection[Any]) -> bool:
        return bool((await self._rows(conn, "soak_any_succeeded", {}))[0]["flowing"])

    async def completions_between(
        self, conn: AsyncConnection[Any], since: datetime, until: datetime
    ) -> list[datetime]:
        rows = await self._rows(conn, "soak_completions_between", {"since": since, "until": until})
        return [r["finished_at"] for r in rows]

    async def lock_pending_limited(self, conn: AsyncConnection[Any], queue: str, limit: int) -> list[int]:
        rows = await self._rows(conn, "soak_lock_pending_limited", {"queue": queue, "limit": limit})
        return [r["id"] for r in rows]

    async def lock_pending_keyed(self, conn: AsyncConnection[Any], key: str) -> list[int]:
        return [r["id"] for r in await self._rows(conn, "soak_lock_pending_keyed", {"key": key})]

    async def hold_window(self, conn: AsyncConnection[Any], limited: str, held: Sequence[int]) -> Row:
        return (await self._rows(conn, "soak_hold_window", {"limited": limited, "held": list(held)}))[0]

    async def terminate_orm(self, conn: AsyncConnection[Any], prefix: str, suffix: str) -> int:
        rows = await self._rows(conn, "soak_terminate_orm", {"prefix": prefix + "%", "suffix": suffix})
        return int(rows[0]["terminated"])

    async def enqueue_worst(
        self,
        conn: AsyncConnection[Any],
        *,
        queue: str,
        run_at: datetime | None,
        unique_key: str,
        payload: str,
    ) -> Row:
        params = {"task": INJECTED_TASK, "payload": payload, "queue": queue, "run_at": run_at,
                  "unique_key": unique_key}  # fmt: skip
        return (await self._rows(conn, "soak_enqueue_worst", params))[0]

    async def insert_unreadable(self, conn: AsyncConnection[Any], queue: str, depth: int) -> int:
        params = {"queue": queue, "task": INJECTED_TASK, "depth": depth}
        return int((await self._rows(conn, "soak_insert_unreadable", params))[0]["id"])

    async def injected(self, conn: AsyncConnection[Any], ids: Sequence[int]) -> list[Row]:
        return await self._rows(conn, "soak_injected", {"ids": list(ids)})

    async def acts_recorded(self, conn: AsyncConnection[Any], job: int, queue: str) -> Row:
        return (await self._rows(conn, "soak_acts_recorded", {"job": job, "queue": queue}))[0]

    async def task_retries(self, conn: AsyncConnection[Any], task: str) -> Row:
        return (await self._rows(conn, "soak_task_retries", {"task": task}))[0]

    async def ordering_violations(self, conn: AsyncConnection[Any]) -> Row:
        return (await self._rows(conn, "soak_ordering_violations"))[0]

    async def effect_states(self, conn: AsyncConnection[Any], task: str) -> list[Row]:
        return await self._rows(conn, "soak_effect_states", {"task": task})

    def account_reopen(self, tx: SyncTransaction, account: int) -> None:
        tx.execute(self._sql["soak_account_reopen"], {"id": account})

    async def vacuums(self, conn: AsyncConnection[Any]) -> Row:
        """Vacuums of `jobs`: by the workers (sessions) and by autovacuum."""
        return (await self._rows(conn, "soak_vacuums"))[0]
