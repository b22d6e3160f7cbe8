"""Periodic jobs without a database: declarations are checked at import time, slots follow the
calendar of their time zone across DST changes, and the missed-slot policies pick the slots."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

import tenure
from tenure.model.schedules import MissedPolicy, missed_policy, next_slot, plan_slots, slots_before

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def slots_between(cron: str, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    found, at = [], start
    while (slot := next_slot(cron, zone, at)) is not None and slot <= end:
        found.append(slot)
        at = slot
    return found


# -- declarations -------------------------------------------------------------------------------


def test_periodic_registers_the_task_and_its_schedule_with_the_tasks_queue() -> None:
    """@app.periodic registers the handler as a task (with its policy) and a schedule named after
    it, taking its queue, priority and budget; 6 fields mean seconds first."""
    app = tenure.Tenure("postgresql://unused")

    @app.periodic("*/10 * * * * *", name="reports.nightly", queue="reports", priority=5, max_attempts=3)
    def nightly(ctx: tenure.JobContext) -> None:
        pass

    task = app.registry.get("reports.nightly")
    assert task is not None and task.policy.queue == "reports"
    schedule = app.registry.schedules["reports.nightly"]
    assert (schedule.task, schedule.queue, schedule.priority, schedule.max_attempts) == (
        "reports.nightly",
        "reports",
        5,
        3,
    )
    assert (schedule.cron, schedule.timezone, str(schedule.missed), schedule.payload) == (
        "*/10 * * * * *",
        "UTC",
        "latest",
        {},
    )
    assert schedule.next_slot(utc(2030, 1, 1, 0, 0, 3)) == utc(2030, 1, 1, 0, 0, 10)


def test_schedule_of_an_existing_task_with_its_own_name_and_payload() -> None:
    """app.schedule gives an existing task a second schedule with its own name and payload."""
    app = tenure.Tenure("postgresql://unused")

    @app.task(name="mail.digest")
    def digest(ctx: tenure.JobContext, kind: str) -> None:
        pass

    app.schedule(
        digest, "0 8 * * MON", name="digest.weekly", payload={"kind": "weekly"}, timezone="Europe/Berlin"
    )
    app.schedule(
        "mail.digest", "0 8 1 * *", name="digest.monthly", payload={"kind": "monthly"}, missed="skip"
    )
    assert sorted(app.registry.schedules) == ["digest.monthly", "digest.weekly"]
    weekly = app.registry.schedules["digest.weekly"]
    # Monday 2030-01-07 08:00 in Berlin is 07:00 UTC.
    assert weekly.next_slot(utc(2030, 1, 1)) == utc(2030, 1, 7, 7)


@pytest.mark.parametrize(
    ("macro", "expression"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@midnight", "0 0 * * *"),
    ],
)
def test_the_usual_cron_macros_are_read_as_the_expressions_they_stand_for(
    macro: str, expression: str
) -> None:
    """`@daily` and its kin are accepted and stored as their five fields."""
    app = tenure.Tenure("postgresql://unused")

    @app.task(name="jobs.tick")
    def tick(ctx: tenure.JobContext) -> None:
        pass

    assert app.schedule(tick, macro).cron == expression


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "*/5 * * *"}, r"has 4 fields; write 5 fields \(minute hour"),
        ({"cron": "61 * * * *"}, r"cron '61 \* \* \* \*' is not valid \(Bad minute\); write 5 fields"),
        ({"cron": "0 0 30 2 *"}, r"is not valid \(Bad day-of-month\)"),
        ({"cron": ""}, "must be a non-empty string"),
        (
            {"cron": "*/61 * * * *"},
            r"steps the minute field by 61, more than its range \(0-59\) holds, so it",
        ),
        ({"cron": "0 */24 * * *"}, r"steps the hour field by 24.*use a step from 1 to 23"),
        ({"cron": "@reboot"}, r"'@reboot' is not a macro Tenure reads; use one of @yearly"),
        ({"timezone": "Europe/Berln"}, r"unknown time zone 'Europe/Berln'; use an IANA name such as"),
        ({"timezone": "../etc/passwd"}, "unknown time zone"),
        ({"missed": "sometimes"}, r"unknown missed-slot policy 'sometimes'; use missed='skip', 'latest'"),
        ({"missed": ("backfill", 0)}, "backfill needs a count of slots from 1 to 1000, got 0"),
        ({"missed": "backfill:x"}, "backfill needs a count of slots from 1 to 1000, got 'x'"),
        ({"missed": ("backfill", True)}, "backfill needs a count"),
        ({"missed": "latest:3"}, "'latest' takes no count"),
        (
            {"payload": {"n": 1}},
            r"its payload does not fit task 'jobs.tick' .*the handler takes no arguments",
        ),
        ({"payload": {"at": datetime(2030, 1, 1)}}, "payload.at is a datetime, which is not JSON"),
    ],
)
def test_a_bad_declaration_fails_at_import_naming_the_schedule_and_the_fix(
    kwargs: dict[str, object], message: str
) -> None:
    """Invalid cron, unknown time zone, bad missed policy or a payload the handler cannot take:
    a ConfigurationError naming the schedule, what is wrong and how to write it."""
    app = tenure.Tenure("postgresql://unused")

    @app.task(name="jobs.tick")
    def tick(ctx: tenure.JobContext) -> None:
        pass

    options: dict[str, object] = {"cron": "* * * * *", **kwargs}
    cron = options.pop("cron")
    with pytest.raises(tenure.ConfigurationError, match=message) as info:
        app.schedule(tick, cron, **options)  # type: ignore[arg-type]
    assert "schedule 'jobs.tick'" in str(info.value)
    assert app.registry.schedules == {}


def test_duplicate_schedule_names_and_unknown_tasks_are_refused() -> None:
    """A second, different schedule under a taken name is refused, naming both; scheduling a task
    the app does not have is refused with how to register it."""
    app = tenure.Tenure("postgresql://unused")

    @app.periodic("*/5 * * * *", name="jobs.sweep")
    def sweep(ctx: tenure.JobContext) -> None:
        pass

    app.schedule(sweep, "*/5 * * * *")  # the very same declaration again is harmless
    with pytest.raises(
        tenure.ConfigurationError, match=r"schedule 'jobs.sweep' is declared twice .*another name="
    ):
        app.schedule(sweep, "0 * * * *")
    with pytest.raises(tenure.ConfigurationError, match=r"no such task; register it with @app.task first"):
        app.schedule("jobs.missing", "* * * * *")
    assert list(app.registry.schedules) == ["jobs.sweep"]


def test_missed_policy_forms() -> None:
    """'skip', 'latest', ('backfill', N) and 'backfill:N' parse to how many missed slots run."""
    assert missed_policy("skip").keeps == 0
    assert missed_policy("latest").keeps == 1
    assert missed_policy(("backfill", 7)) == missed_policy("backfill:7") == MissedPolicy("backfill", 7)
    assert str(missed_policy(("backfill", 7))) == "backfill:7" and missed_policy("backfill:7").keeps == 7


# -- the calendar -------------------------------------------------------------------------------


def test_a_daily_slot_in_berlin_fires_once_a_day_across_both_dst_changes() -> None:
    """'30 2 * * *' in Europe/Berlin: on the spring-forward day 02:30 does not exist and the slot
    runs at 03:00 CEST; on the fall-back day 02:30 happens twice and the slot runs once, at the
    first (CEST). Every day has exactly one slot, at the UTC instant its local time says."""
    spring = slots_between("30 2 * * *", BERLIN, utc(2024, 3, 29), utc(2024, 4, 2))
    assert spring == [
        utc(2024, 3, 29, 1, 30),
        utc(2024, 3, 30, 1, 30),
        utc(2024, 3, 31, 1, 0),
        utc(2024, 4, 1, 0, 30),
    ]
    autumn = slots_between("30 2 * * *", BERLIN, utc(2024, 10, 26), utc(2024, 10, 29))
    assert autumn == [utc(2024, 10, 26, 0, 30), utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]
    # Walking back from the same end finds the same slots: the scheduler's direction.
    walk = slots_before("30 2 * * *", BERLIN, utc(2024, 10, 29))
    back = list(itertools.takewhile(lambda s: s >= utc(2024, 10, 26), walk))
    assert back == autumn[::-1]


def test_an_hourly_slot_follows_real_hours_across_dst() -> None:
    """'0 * * * *' in Berlin runs every real hour: 23 slots on the spring-forward day, 25 on the
    fall-back day (02:00 CEST and 02:00 CET are both slots), one hour apart throughout."""
    spring_day = slots_between(
        "0 * * * *",
        BERLIN,
        utc(2024, 3, 30, 23) - timedelta(seconds=1),
        utc(2024, 3, 31, 22) - timedelta(seconds=1),
    )
    assert len(spring_day) == 23
    autumn_day = slots_between(
        "0 * * * *",
        BERLIN,
        utc(2024, 10, 26, 22) - timedelta(seconds=1),
        utc(2024, 10, 27, 23) - timedelta(seconds=1),
    )
    assert len(autumn_day) == 25
    gaps = {b - a for a, b in itertools.pairwise(autumn_day)}
    assert gaps == {timedelta(hours=1)}


# -- which due slots a tick fires ---------------------------------------------------------------

EVERY_MINUTE = "* * * * *"
NOW = utc(2030, 1, 1, 12, 0, 0, 500000)


def test_on_time_slots_all_fire_and_nothing_is_due_twice() -> None:
    """Slots within the grace of now all fire, whatever the policy; a tick right after finds none."""
    every_second = "* * * * * *"
    for policy in ("skip", "latest", "backfill:2"):
        plan = plan_slots(
            every_second,
            UTC,
            after=NOW - timedelta(seconds=3),
            now=NOW,
            missed=missed_policy(policy),
            grace=5,
        )
        assert plan.fire == [utc(2030, 1, 1, 11, 59, 58), utc(2030, 1, 1, 11, 59, 59), utc(2030, 1, 1, 12)]
        assert plan.advance_to == utc(2030, 1, 1, 12) and not plan.skipped
        again = plan_slots(
            every_second, UTC, after=plan.advance_to, now=NOW, missed=missed_policy(policy), grace=5
        )
        assert again.fire == [] and again.advance_to is None


@pytest.mark.parametrize(
    ("policy", "fired_minutes"),
    [("skip", []), ("latest", [59]), ("backfill:3", [57, 58, 59]), ("backfill:100", list(range(50, 60)))],
)
def test_missed_slots_after_a_gap_follow_the_policy(policy: str, fired_minutes: list[int]) -> None:
    """Ten minutes with no scheduler (last slot 11:50), now 12:00:30 with a 5 s grace: the on-time
    12:00 slot fires, and of the missed 11:51-11:59 skip runs none, latest the 11:59 one, backfill
    the N latest (all there are when N is larger); last_slot moves to 12:00 either way."""
    now = utc(2030, 1, 1, 12, 0, 3)
    plan = plan_slots(
        EVERY_MINUTE, UTC, after=utc(2030, 1, 1, 11, 50), now=now, missed=missed_policy(policy), grace=5
    )
    assert plan.fire == [utc(2030, 1, 1, 11, m) for m in fired_minutes if m > 50] + [utc(2030, 1, 1, 12)]
    assert plan.advance_to == utc(2030, 1, 1, 12)
    assert plan.skipped is (policy != "backfill:100")


def test_a_long_gap_of_a_frequent_schedule_costs_only_the_slots_fired() -> None:
    """A month without a scheduler on an every-second schedule (2.6 million missed slots): 'latest'
    plans one missed slot plus the on-time ones, in milliseconds, never walking the whole gap."""
    started = time.perf_counter()
    plan = plan_slots(
        "* * * * * *", UTC, after=NOW - timedelta(days=30), now=NOW, missed=missed_policy("latest"), grace=2
    )
    assert time.perf_counter() - started < 0.5
    assert plan.fire == [utc(2030, 1, 1, 11, 59, 58), utc(2030, 1, 1, 11, 59, 59), utc(2030, 1, 1, 12)]
    assert plan.skipped
