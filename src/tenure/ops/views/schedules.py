"""A schedule as the operator's faces show it: whether it can be planned, when it fires next,
and its status."""

from __future__ import annotations

from typing import Any

from cronsim import CronSim, CronSimError

from tenure.model.errors import ConfigurationError
from tenure.model.schedules import DEFAULT_STALE_AFTER, next_fire, schedule_status, zone_of


def schedule_problem(row: dict[str, Any]) -> str | None:
    """Why this host cannot plan a listed schedule (a cron it cannot parse, a time zone it does
    not know), or None. Such a row was written by another version of the app or by hand; the
    scheduler skips it, and a listing shows it as broken instead of failing as a whole."""
    try:
        zone = zone_of(row["timezone"])
    except ConfigurationError:
        return f"unknown time zone {row['timezone']} on this host"
    try:
        CronSim(row["cron"], row["db_now"].astimezone(zone))
    except CronSimError as exc:
        text = str(exc) or "cronsim cannot parse it"
        return f"invalid cron: {text[:1].lower()}{text[1:]}"
    return None


def planned(row: dict[str, Any], stale_after: float = DEFAULT_STALE_AFTER) -> dict[str, Any]:
    """A schedule_list row with its `problem`, `next_fire` (None when broken or paused) and
    `status`: 'broken' for one that would be active but cannot be planned, as it never fires."""
    row["problem"] = schedule_problem(row)
    row["next_fire"] = None if row["problem"] else next_fire(row)
    row["status"] = schedule_status(row, stale_after)
    if row["problem"] and row["status"] == "active":
        row["status"] = "broken"
    return row
