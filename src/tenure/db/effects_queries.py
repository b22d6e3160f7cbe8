"""Typed access to the effect ledger's named queries (effects.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.fetch import fetch, fetch_as
from tenure.db.sqlfiles import named_queries


@dataclass(frozen=True, slots=True)
class EffectStep:
    """What an attempt must do with one named effect, as decided by `effect_begin`."""

    effect_id: int
    action: str  # 'perform' | 'done' | 'uncertain'
    token: int
    outcome: Any


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One named effect of a job as the ledger lists it, with its job's queue, task and state."""

    id: int
    job_id: int
    queue: str
    task: str
    name: str
    state: str
    """'intent', 'done', 'uncertain' or 'not_happened'."""
    token: int
    outcome: Any
    resolved_by: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    job_state: str


@dataclass(frozen=True, slots=True)
class ResolvedEffect:
    """An effect an operator resolved, and the state of its job."""

    id: int
    job_id: int
    job_state: str


class EffectQueries:
    def __init__(self, schema: str) -> None:
        self._sql = named_queries(schema)

    async def begin(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        name: str,
        owner: str,
        token: int,
        now: datetime | None = None,
    ) -> EffectStep | None:
        """Records an intent (fenced); None when this attempt no longer holds the lease."""
        params = {"job_id": job_id, "name": name, "owner": owner, "token": token, "now": now}
        rows = await fetch(conn, self._sql["effect_begin"], params)
        if not rows:
            return None
        r = rows[0]
        return EffectStep(r["id"], r["action"], r["token"], r["outcome"])

    async def done(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        name: str,
        token: int,
        outcome: Any,
        now: datetime | None = None,
    ) -> bool:
        params = {"job_id": job_id, "name": name, "token": token, "outcome": Jsonb(outcome), "now": now}
        return bool(await fetch(conn, self._sql["effect_done"], params))

    async def reconciled(
        self,
        conn: AsyncConnection[Any],
        *,
        job_id: int,
        name: str,
        owner: str,
        token: int,
        state: str,
        outcome: Any,
        now: datetime | None = None,
    ) -> bool:
        params = {
            "job_id": job_id,
            "name": name,
            "owner": owner,
            "token": token,
            "state": state,
            "outcome": Jsonb(outcome) if outcome is not None else None,
            "now": now,
        }
        return bool(await fetch(conn, self._sql["effect_reconciled"], params))

    async def list(
        self,
        conn: AsyncConnection[Any],
        *,
        state: str | None = None,
        job_id: int | None = None,
        limit: int = 100,
    ) -> list[LedgerEntry]:
        """The effects in `state` (None: any) of job `job_id` (None: any job), the least
        recently changed first."""
        params = {"state": state, "job_id": job_id, "limit": limit}
        return await fetch_as(conn, LedgerEntry, self._sql["effect_list"], params)

    async def resolve(
        self,
        conn: AsyncConnection[Any],
        *,
        effect_id: int,
        state: str,
        actor: str,
        reason: str,
        outcome: Any = None,
        now: datetime | None = None,
    ) -> ResolvedEffect | None:
        """Settles an uncertain effect (or the intent of a job no longer running) as `state`;
        None when it is neither."""
        params = {
            "id": effect_id,
            "state": state,
            "actor": actor,
            "reason": reason,
            "outcome": Jsonb(outcome) if outcome is not None else None,
            "now": now,
        }
        rows = await fetch_as(conn, ResolvedEffect, self._sql["effect_resolve"], params)
        return rows[0] if rows else None
