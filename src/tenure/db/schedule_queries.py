"""Typed access to the periodic-job queries (schedules.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tenure.db.channels import notify_channel
from tenure.db.fetch import fetch, fetch_as
from tenure.db.sqlfiles import named_queries
from tenure.db.text import storable_text
from tenure.model.actor import default_actor
from tenure.model.schedules import Schedule


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A registered schedule as a scheduler plans its next fire."""

    name: str
    cron: str
    timezone: str
    missed: str
    paused: bool
    last_slot: datetime
    key_namespace: uuid.UUID


@dataclass(frozen=True, slots=True)
class ScheduleFire:
    """What one fire statement did. `won` False: the schedule was fired by another scheduler
    since the plan was made, changed, paused or unknown, and nothing was written."""

    won: bool
    last_slot: datetime | None
    slots: list[datetime]
    job_ids: list[int]
    db_now: datetime


@dataclass(frozen=True, slots=True)
class ListedSchedule:
    """A registered schedule as the operator's faces list it: its declaration, pause and last
    resume, its slots, and how long since a worker last declared it, read at `db_now`."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int
    missed: str
    paused: bool
    paused_at: datetime | None
    paused_by: str | None
    pause_reason: str | None
    resumed_at: datetime | None
    resumed_by: str | None
    resume_reason: str | None
    last_slot: datetime
    last_fired_slot: datetime | None
    created_at: datetime
    updated_at: datetime
    declared_at: datetime
    undeclared_seconds: float
    db_now: datetime


@dataclass(frozen=True, slots=True)
class RecentFire:
    """One fired slot of a schedule: the job it enqueued (its state None once retention deleted
    it), the worker that fired it, and when."""

    slot: datetime
    job_id: int
    worker: str | None
    fired_at: datetime
    job_state: str | None


@dataclass(frozen=True, slots=True)
class SchedulePause:
    """What a schedule's pause did: 'paused', or 'already' with the pause that was there."""

    outcome: str
    paused_at: datetime | None
    paused_by: str | None
    pause_reason: str | None


@dataclass(frozen=True, slots=True)
class ScheduleResume:
    """What a schedule's resume did: 'resumed', skipping the slots due until `skipped_until`, or
    'not_paused'."""

    outcome: str
    skipped_until: datetime | None


class ScheduleQueries:
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = named_queries(schema)
        self.channel = notify_channel(schema)

    async def register(
        self, conn: AsyncConnection[Any], schedules: Sequence[Schedule], now: datetime | None = None
    ) -> dict[str, bool]:
        """Upserts the declarations; each name with True when it is new to the table."""
        ordered = sorted(schedules, key=lambda s: s.name)
        params = {
            "names": [s.name for s in ordered],
            "tasks": [s.task for s in ordered],
            "queues": [s.queue for s in ordered],
            "crons": [s.cron for s in ordered],
            "timezones": [s.timezone for s in ordered],
            "payloads": [Jsonb(s.payload) for s in ordered],
            "priorities": [s.priority for s in ordered],
            "max_attempts": [s.max_attempts for s in ordered],
            "missed": [str(s.missed) for s in ordered],
            "now": now,
        }
        rows = await fetch(conn, self._sql["schedule_register"], params)
        return {r["name"]: bool(r["created"]) for r in rows}

    async def state(
        self, conn: AsyncConnection[Any], names: Sequence[str], now: datetime | None = None
    ) -> tuple[datetime, list[ScheduleState]]:
        """The database's now, and the registered schedules among `names`."""
        rows = await fetch(conn, self._sql["schedule_state"], {"names": list(names), "now": now})
        found = [
            ScheduleState(
                r["name"],
                r["cron"],
                r["timezone"],
                r["missed"],
                r["paused"],
                r["last_slot"],
                r["key_namespace"],
            )
            for r in rows
            if r["name"] is not None
        ]
        return rows[0]["db_now"], found

    async def fire(
        self,
        conn: AsyncConnection[Any],
        *,
        name: str,
        seen_last_slot: datetime,
        cron: str,
        timezone: str,
        slots: Sequence[datetime],
        keys: Sequence[uuid.UUID],
        advance_to: datetime,
        worker: str,
        now: datetime | None = None,
    ) -> ScheduleFire:
        params = {
            "name": name,
            "seen_last_slot": seen_last_slot,
            "cron": cron,
            "timezone": timezone,
            "slots": list(slots),
            "keys": list(keys),
            "advance_to": advance_to,
            "worker": worker,
            "channel": self.channel,
            "now": now,
        }
        [r] = await fetch(conn, self._sql["schedule_fire"], params)
        return ScheduleFire(bool(r["won"]), r["last_slot"], list(r["slots"]), list(r["job_ids"]), r["db_now"])

    async def list_all(self, conn: AsyncConnection[Any], now: datetime | None = None) -> list[ListedSchedule]:
        return await fetch_as(conn, ListedSchedule, self._sql["schedule_list"], {"now": now})

    async def fires(self, conn: AsyncConnection[Any], name: str, *, limit: int = 20) -> list[RecentFire]:
        """The schedule's latest fired slots, the latest first."""
        params = {"name": name, "limit": limit}
        return await fetch_as(conn, RecentFire, self._sql["schedule_fires_recent"], params)

    async def pause(
        self, conn: AsyncConnection[Any], name: str, *, actor: str, reason: str, now: datetime | None = None
    ) -> SchedulePause | None:
        """What the pause did ('paused', or 'already' with the pause that was there); None: no
        such schedule."""
        params = {
            "name": name,
            "actor": storable_text(actor, 200),
            "reason": storable_text(reason, 2000),
            "now": now,
        }
        rows = await fetch(conn, self._sql["schedule_pause"], params)
        return SchedulePause(**rows[0]) if rows else None

    async def resume(
        self,
        conn: AsyncConnection[Any],
        name: str,
        now: datetime | None = None,
        *,
        actor: str | None = None,
        reason: str | None = None,
    ) -> ScheduleResume | None:
        """What the resume did ('resumed', and the slots it skipped until; or 'not_paused'); None:
        no such schedule. The resume is recorded on the schedule as `actor` (default user@host)
        with `reason`."""
        params = {
            "name": name,
            "actor": storable_text(actor or default_actor(), 200),
            "reason": storable_text(reason, 2000) if reason and reason.strip() else None,
            "now": now,
        }
        rows = await fetch(conn, self._sql["schedule_resume"], params)
        return ScheduleResume(**rows[0]) if rows else None

    async def prune_fires(
        self, conn: AsyncConnection[Any], *, seconds: float, limit: int, now: datetime | None = None
    ) -> int:
        params = {"seconds": seconds, "limit": limit, "now": now}
        return len(await fetch(conn, self._sql["schedule_fires_prune"], params))
