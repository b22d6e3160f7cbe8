"""The scheduler: fires the periodic jobs of the schedules its app declares.

Every worker whose app declares schedules runs one; there is no leader. Each tick reads the
schedules' last slots with the database's now, plans the due slots in Python (tenure.model.schedules)
and fires each schedule's plan in one guarded statement (schedule_fire), which only the first
scheduler to take the schedule's row can carry out: the others find its last slot moved on and
write nothing. A scheduler fires only schedules its own app declares, so a schedule removed from
the code stops firing once no running worker declares it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from cronsim import CronSimError

from tenure.db.schedule_queries import ScheduleQueries, ScheduleState
from tenure.model.errors import ConfigurationError
from tenure.model.schedules import (
    MIN_ON_TIME_GRACE,
    Schedule,
    missed_policy,
    next_slot,
    plan_slots,
    slot_key,
    zone_of,
)
from tenure.worker.service import Service
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: How often a scheduler re-registers its schedules (seconds): refreshes `declared_at`, so
#: `tenure schedules list` can tell a schedule no running worker declares any more.
REGISTER_INTERVAL = 15.0
#: The shortest sleep between two ticks, so a burst of due times costs one tick, not many.
TICK_RESOLUTION = 0.01
#: Added to each sleep until a slot: the slot is due once the database's now has reached it,
#: and the local clock may run a little ahead of the database's.
SLOT_MARGIN = 0.005


@dataclass
class Tick:
    """One pass over the schedules: the slots fired per schedule, and when the next is due."""

    db_now: datetime
    fired: dict[str, list[datetime]] = field(default_factory=dict)
    next_due: datetime | None = None


class Scheduler(Service):
    """Fires the app's schedules: each due slot once, cluster-wide, as a job."""

    name = "scheduler"

    def __init__(
        self,
        services: WorkerServices,
        schedules: Sequence[Schedule],
        *,
        grace: float | None = None,
        wake_claimer: Callable[[], None] = lambda: None,
    ) -> None:
        self.services = services
        self.schedules = {s.name: s for s in schedules}
        self.queries = ScheduleQueries(services.queries.schema)
        if grace is None:
            grace = max(MIN_ON_TIME_GRACE, 2 * services.options.poll_interval)
        self.grace = grace
        self.wake_claimer = wake_claimer
        self.health = services.health.service(self.name, critical=False)
        self.fired = 0
        self._registered_at: float | None = None

    async def register(self, *, now: datetime | None = None) -> dict[str, bool]:
        """Upserts this app's schedules; each name with True when it was new (starts at now)."""
        async with self.services.connection() as conn:
            created = await self.queries.register(conn, list(self.schedules.values()), now=now)
        self._registered_at = self.clock.monotonic()
        new = sorted(name for name, is_new in created.items() if is_new)
        if new:
            log.info("registered new schedules, firing from now on: %s", ", ".join(new))
        return created

    async def run_once(self, *, now: datetime | None = None) -> Tick:
        """Fires every due slot of this app's schedules at `now` (database time by default).
        On the database's own time, the schedules are registered first, now and then."""
        if now is None and (
            self._registered_at is None or self.clock.monotonic() - self._registered_at >= REGISTER_INTERVAL
        ):
            await self.register()
        services = self.services
        async with services.connection() as conn:
            db_now, states = await self.queries.state(conn, list(self.schedules), now=now)
        tick = Tick(db_now)
        for state in states:
            if state.paused:
                continue
            try:
                zone = zone_of(state.timezone, where=f"schedule {state.name!r}")
                fired = await self._fire(state, zone, db_now, now)
                upcoming = next_slot(state.cron, zone, max(db_now, state.last_slot))
            except (ConfigurationError, CronSimError) as exc:
                # Registered by another version of the app (a rolling deploy) with a definition this
                # host cannot read: workers that can read it fire it; the other schedules go on here.
                log.warning("schedule %s cannot be planned on this worker: %s", state.name, exc)
                continue
            if fired:
                tick.fired[state.name] = fired
            if upcoming is not None and (tick.next_due is None or upcoming < tick.next_due):
                tick.next_due = upcoming
        if tick.fired:
            self.wake_claimer()
        return tick

    async def _fire(
        self, state: ScheduleState, zone: ZoneInfo, db_now: datetime, now: datetime | None
    ) -> list[datetime]:
        plan = plan_slots(
            state.cron,
            zone,
            after=state.last_slot,
            now=db_now,
            missed=missed_policy(state.missed, where=f"schedule {state.name!r}"),
            grace=self.grace,
        )
        if plan.advance_to is None:
            return []
        schema = self.services.queries.schema
        async with self.services.connection() as conn:
            result = await self.queries.fire(
                conn,
                name=state.name,
                seen_last_slot=state.last_slot,
                cron=state.cron,
                timezone=state.timezone,
                slots=plan.fire,
                keys=[slot_key(state.key_namespace, schema, state.name, s) for s in plan.fire],
                advance_to=plan.advance_to,
                worker=self.services.owner,
                now=now,
            )
        if not result.won:
            return []  # another scheduler fired it first, or it was paused or changed meanwhile
        if plan.skipped:
            log.info(
                "schedule %s: slots missed while no scheduler ran, before %s, were skipped (missed=%s)",
                state.name,
                (plan.fire[0] if plan.fire else plan.advance_to).isoformat(),
                state.missed,
            )
        self.fired += len(result.slots)
        return result.slots

    def _sleep_for(self, tick: Tick) -> float:
        sleep = self.services.options.poll_interval
        if tick.next_due is not None:
            sleep = min(sleep, (tick.next_due - tick.db_now).total_seconds() + SLOT_MARGIN)
        return max(TICK_RESOLUTION, sleep)

    def next_delay(self, tick: Tick) -> float:
        return self._sleep_for(tick)
