"""Periodic jobs: schedules declared in code, their cron slots and the missed-slot policy.

A schedule names a task, a cron expression and the time zone it is read in. Its slots are the
instants the expression matches; every worker whose app declares the schedule runs a scheduler
(tenure.worker.scheduler) that fires each due slot once, as a job of the task. This module is
pure computation: which slots are due between the last one a schedule considered and the
database's now, and which of them to fire. docs/schedules.md is the user's account of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from tenure.model.errors import ConfigurationError
from tenure.model.validation import DEFAULT_MAX_PAYLOAD_BYTES, check_payload, check_task_name


class _Policy(Protocol):
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...


class ScheduledTask(Protocol):
    """What a schedule needs of its task (a tenure.Task is one): its name, its policy's queue,
    priority and budget, and whether a payload fits its handler."""

    @property
    def name(self) -> str: ...
    @property
    def policy(self) -> _Policy: ...
    def accepts(self, payload: dict[str, Any], *, check_types: bool = True) -> str | None: ...
    def parameters(self) -> str: ...


#: The most missed slots `("backfill", N)` may run after a gap.
MAX_BACKFILL = 1000
MISSED_KINDS = ("skip", "latest", "backfill")
#: A slot a scheduler sees no later than this after it is on time and always fires; an older
#: unfired slot was missed (no scheduler ran at the time) and the missed policy decides. The
#: scheduler's grace is the larger of this and two of its poll intervals.
MIN_ON_TIME_GRACE = 2.0

_CRON_HELP = (
    "write 5 fields (minute hour day-of-month month day-of-week), like '*/5 * * * *', "
    "or 6 with seconds first, like '*/10 * * * * *', or a macro such as '@daily'"
)


@dataclass(frozen=True, slots=True)
class MissedPolicy:
    """What a scheduler does with slots that fell due while no scheduler ran.

    skip: none of them runs; latest: only the latest runs, once; backfill: the `count` latest
    run, oldest first. Slots within the grace of now are on time, not missed: they always run.
    """

    kind: str
    count: int = 0

    @property
    def keeps(self) -> int:
        """How many missed slots run after a gap."""
        return {"skip": 0, "latest": 1}.get(self.kind, self.count)

    def __str__(self) -> str:
        return f"backfill:{self.count}" if self.kind == "backfill" else self.kind


def missed_policy(value: object, *, where: str = "missed") -> MissedPolicy:
    """'skip', 'latest', ('backfill', N) or 'backfill:N', as a MissedPolicy (one given passes)."""
    if isinstance(value, MissedPolicy):
        return value
    fix = (
        "use missed='skip', 'latest' (the default), ('backfill', N) or 'backfill:N' "
        f"with N from 1 to {MAX_BACKFILL}"
    )
    count: object = None
    if isinstance(value, str):
        kind, sep, rest = value.strip().partition(":")
        if sep:
            count = int(rest) if rest.strip().isdigit() else rest
    elif isinstance(value, tuple) and len(value) == 2:
        kind, count = value
    else:
        raise ConfigurationError(f"{where}: {value!r} is not a missed-slot policy; {fix}")
    if kind not in MISSED_KINDS:
        raise ConfigurationError(f"{where}: unknown missed-slot policy {kind!r}; {fix}")
    if kind != "backfill":
        if count is not None:
            raise ConfigurationError(f"{where}: {kind!r} takes no count; {fix}")
        return MissedPolicy(kind)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_BACKFILL:
        raise ConfigurationError(
            f"{where}: backfill needs a count of slots from 1 to {MAX_BACKFILL}, got {count!r}; {fix}"
        )
    return MissedPolicy("backfill", count)


def zone_of(timezone: object, *, where: str = "timezone") -> ZoneInfo:
    """The IANA time zone named `timezone`, or a ConfigurationError naming the fix."""
    fix = "use an IANA name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
    if not isinstance(timezone, str) or not timezone:
        raise ConfigurationError(f"{where}: the time zone must be a name, got {timezone!r}; {fix}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(f"{where}: unknown time zone {timezone!r}; {fix}") from None


#: The usual macros, read as the expressions they stand for.
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: Each field's name and its values' range, in order (a 6-field expression has seconds first).
_CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),
)
_SECONDS_FIELD = ("second", 0, 59)


def _check_steps(cron: str, expression: str, where: str) -> None:
    """Refuses a step larger than its field's range (`*/61` in the minute field): cron would
    match only the field's first value, once an hour, not every 61 minutes."""
    parts = expression.split()
    names = ((_SECONDS_FIELD,) if len(parts) == 6 else ()) + _CRON_FIELDS
    for (name, low, high), part in zip(names, parts, strict=True):
        for item in part.split(","):
            _, slash, step = item.partition("/")
            if slash and step.isdigit() and int(step) > high - low:
                example = f"{low},{low + (high - low + 1) // 2}"
                raise ConfigurationError(
                    f"{where}: cron {cron!r} steps the {name} field by {step}, more than its range "
                    f"({low}-{high}) holds, so it would match only once per {_WIDER[name]}; use a step "
                    f"from 1 to {high - low}, or list the values (for example '{example}')"
                )


_WIDER = {
    "second": "minute",
    "minute": "hour",
    "hour": "day",
    "day-of-month": "month",
    "month": "year",
    "day-of-week": "week",
}


def check_cron(cron: object, zone: ZoneInfo, *, where: str = "cron") -> str:
    """The expression (a macro such as '@daily' as the one it stands for), once cronsim parses
    it, no field steps past its range, and it matches some instant in the next 50 years."""
    if not isinstance(cron, str) or not cron.strip() or len(cron) > 200:
        raise ConfigurationError(
            f"{where}: the cron expression must be a non-empty string of at most 200 characters, "
            f"got {cron!r}; {_CRON_HELP}"
        )
    expression = " ".join(cron.split())
    if expression.startswith("@"):
        if expression.lower() not in CRON_MACROS:
            raise ConfigurationError(
                f"{where}: cron {cron!r} is not a macro Tenure reads; use one of "
                f"{', '.join(CRON_MACROS)}, or write 5 fields like '0 3 * * *'"
            )
        expression = CRON_MACROS[expression.lower()]
    fields = len(expression.split())
    if fields not in (5, 6):
        raise ConfigurationError(f"{where}: cron {cron!r} has {fields} fields; {_CRON_HELP}")
    _check_steps(cron, expression, where)
    try:
        next(CronSim(expression, datetime.now(UTC).astimezone(zone)))
    except CronSimError as exc:
        raise ConfigurationError(f"{where}: cron {cron!r} is not valid ({exc}); {_CRON_HELP}") from None
    except StopIteration:
        raise ConfigurationError(
            f"{where}: cron {cron!r} matches no time in the next 50 years; {_CRON_HELP}"
        ) from None
    return expression


def slots_before(cron: str, zone: ZoneInfo, until: datetime) -> Iterator[datetime]:
    """The slots at or before `until`, latest first, in UTC."""
    # cronsim's reverse walk starts one second before its start; slots are whole seconds.
    start = until.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
    for slot in CronSim(cron, start.astimezone(zone), reverse=True):
        found = slot.astimezone(UTC)
        if found <= until:  # a DST fix-up may step forward; never past `until`
            yield found


def next_slot(cron: str, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first slot later than `after`, in UTC; None when none comes in 50 years."""
    try:
        return next(CronSim(cron, after.astimezone(zone))).astimezone(UTC)
    except StopIteration:
        return None


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """What one scheduler tick does with one schedule: fire `fire` (oldest first) and move the
    schedule's last slot to `advance_to`, the latest due slot (None: nothing was due)."""

    fire: list[datetime]
    advance_to: datetime | None
    skipped: bool = False
    """Some missed slots were left unfired by the policy (they are not counted: a long gap of a
    frequent schedule holds millions)."""


#: A schedule no worker has registered for this long is shown as declared by no running worker
#: (workers re-register theirs every 15 s).
DEFAULT_STALE_AFTER = 60.0


def plan_slots(
    cron: str, zone: ZoneInfo, *, after: datetime, now: datetime, missed: MissedPolicy, grace: float
) -> SlotPlan:
    """The due slots (later than `after`, not later than `now`) a tick fires: every one within
    `grace` seconds of `now`, and the `missed.keeps` latest of the older ones.

    Walks back from `now`, so the cost is the slots fired plus one, however long the gap.
    """
    on_time_from = now - timedelta(seconds=grace)
    fire: list[datetime] = []
    latest: datetime | None = None
    kept = 0
    skipped = False
    for slot in slots_before(cron, zone, now):
        if slot <= after:
            break
        if latest is None:
            latest = slot
        if slot >= on_time_from:
            fire.append(slot)
        elif kept < missed.keeps:
            fire.append(slot)
            kept += 1
        else:
            skipped = True
            break
    fire.reverse()
    return SlotPlan(fire, latest, skipped)


def slot_key(namespace: uuid.UUID, schema: str, schedule: str, slot: datetime) -> uuid.UUID:
    """The idempotency key of a slot's job: the same for every scheduler that computes it."""
    return uuid.uuid5(namespace, f"{schema}:{schedule}:{slot.astimezone(UTC).isoformat()}")


@dataclass(frozen=True)
class Schedule:
    """A declared schedule: `task`'s jobs, with `payload`, at the slots of `cron` in `timezone`."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    payload: dict[str, Any]
    missed: MissedPolicy
    priority: int
    max_attempts: int
    zone: ZoneInfo = field(compare=False, repr=False)

    def next_slot(self, after: datetime) -> datetime | None:
        return next_slot(self.cron, self.zone, after)


def declare_schedule(
    task: ScheduledTask,
    cron: object,
    *,
    name: str | None,
    timezone: object,
    payload: dict[str, Any] | None,
    missed: object,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Schedule:
    """Checks a declaration, naming the schedule, the problem and the fix in the error."""
    schedule_name = name if name is not None else task.name
    try:
        check_task_name(schedule_name)
    except ConfigurationError as exc:
        raise ConfigurationError(f"schedule name: {exc}") from None
    where = f"schedule {schedule_name!r}"
    zone = zone_of(timezone, where=where)
    expression = check_cron(cron, zone, where=where)
    policy = missed_policy(missed, where=where)
    body = {} if payload is None else payload
    try:
        check_payload(body, max_bytes=max_payload_bytes)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    mismatch = task.accepts(body)
    if mismatch is not None:
        raise ConfigurationError(
            f"{where}: its payload does not fit task {task.name!r} ({mismatch}); the handler takes "
            f"{task.parameters()}"
        )
    return Schedule(
        name=schedule_name,
        task=task.name,
        queue=task.policy.queue,
        cron=expression,
        timezone=str(timezone),
        payload=body,
        missed=policy,
        priority=task.policy.priority,
        max_attempts=task.policy.max_attempts,
        zone=zone,
    )
