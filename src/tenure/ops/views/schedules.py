"""A schedule as the operator's faces show it: whether it can be planned, when it fires next,
and its status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cronsim import CronSim, CronSimError

from tenure.db.schedule_queries import ListedSchedule, SchedulePause, ScheduleResume
from tenure.model.errors import ConfigurationError
from tenure.model.schedules import DEFAULT_STALE_AFTER, next_slot, zone_of


@dataclass(frozen=True, slots=True)
class PlannedSchedule:
    """A listed schedule with what this host makes of it."""

    schedule: ListedSchedule
    problem: str | None
    """Why this host cannot plan it (schedule_problem), or None."""
    next_fire: datetime | None
    """Its next slot; None when it is broken or paused."""
    status: str
    """'active', 'paused', 'not declared by any running worker', or 'broken': it would be active
    but cannot be planned, so it never fires."""


def schedule_problem(row: ListedSchedule) -> str | None:
    """Why this host cannot plan a listed schedule (a cron it cannot parse, a time zone it does
    not know), or None. Such a row was written by another version of the app or by hand; the
    scheduler skips it, and a listing shows it as broken instead of failing as a whole."""
    try:
        zone = zone_of(row.timezone)
    except ConfigurationError:
        return f"unknown time zone {row.timezone} on this host"
    try:
        CronSim(row.cron, row.db_now.astimezone(zone))
    except CronSimError as exc:
        text = str(exc) or "cronsim cannot parse it"
        return f"invalid cron: {text[:1].lower()}{text[1:]}"
    return None


def planned(row: ListedSchedule, stale_after: float = DEFAULT_STALE_AFTER) -> PlannedSchedule:
    """A schedule_list row with its problem, next fire and status; a schedule no worker declared
    for `stale_after` seconds is 'not declared by any running worker'."""
    problem = schedule_problem(row)
    if row.undeclared_seconds > stale_after:
        status = "not declared by any running worker"
    elif row.paused:
        status = "paused"
    else:
        status = "broken" if problem else "active"
    upcoming = None
    if problem is None and not row.paused:
        upcoming = next_slot(row.cron, zone_of(row.timezone), max(row.db_now, row.last_slot))
    return PlannedSchedule(row, problem, upcoming, status)


def refusal(name: str, change: SchedulePause | ScheduleResume) -> str | None:
    """Why the schedule's state refused a pause (already paused) or a resume (not paused), or None
    when the change was made."""
    if isinstance(change, SchedulePause) and change.outcome == "already":
        since = change.paused_at.isoformat() if change.paused_at else "?"
        return (
            f"schedule {name!r} is already paused (since {since} by {change.paused_by}: "
            f"{change.pause_reason}); nothing was changed"
        )
    if isinstance(change, ScheduleResume) and change.outcome == "not_paused":
        return f"schedule {name!r} is not paused; nothing was changed"
    return None
