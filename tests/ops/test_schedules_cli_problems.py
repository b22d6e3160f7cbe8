"""`tenure schedules list|show` with a schedule this host cannot read: that row says what is
wrong with it, and every other schedule is listed as usual."""

from __future__ import annotations

import json

import pytest
from _ops import cli, sql

from tenure.ops.cli._common import out as console


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as a wide terminal shows them, so no cell is cut."""
    monkeypatch.setattr(console, "width", 240)


def add_schedule(dsn: str, name: str, cron: str, timezone: str = "UTC") -> None:
    """A schedule row as a worker of some other version of the app might have registered it."""
    sql(
        dsn,
        "INSERT INTO tenure.schedules (name, task, queue, cron, timezone, last_slot) "
        "VALUES (%s, 'app.report', 'reports', %s, %s, now())",
        (name, cron, timezone),
    )


def test_list_marks_a_schedule_with_an_invalid_cron_and_lists_the_others(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cron cronsim cannot parse and a time zone this host does not know are each shown on their
    own row as the problem, exit 0; the valid schedule keeps its next fire; no traceback."""
    add_schedule(dsn, "a.good", "*/5 * * * *")
    add_schedule(dsn, "b.broken", "not a cron")
    add_schedule(dsn, "c.elsewhere", "0 3 * * *", "Mars/Olympus_Mons")
    code, printed, err = cli(capsys, "schedules", "list", "--dsn", dsn)
    assert code == 0, err
    assert "Traceback" not in printed + err and "CronSimError" not in printed + err
    rows = {
        line.split()[1]: line for line in printed.splitlines() if line.split()[1:2] and "." in line.split()[1]
    }
    assert "invalid cron: wrong number of fields" in rows["b.broken"] and "broken" in rows["b.broken"]
    assert "unknown time zone Mars/Olympus_Mons" in rows["c.elsewhere"]
    assert "in " in rows["a.good"] and "invalid" not in rows["a.good"]


def test_list_json_carries_the_problem_of_each_schedule(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--json gives every schedule a `problem`: null for a readable one, the reason for the broken
    one, whose next fire is null."""
    add_schedule(dsn, "a.good", "*/5 * * * *")
    add_schedule(dsn, "b.broken", "not a cron")
    code, printed, err = cli(capsys, "schedules", "list", "--dsn", dsn, "--json")
    assert code == 0, err
    listed = {row["name"]: row for row in json.loads(printed)}
    assert listed["a.good"]["problem"] is None and listed["a.good"]["next_fire"] is not None
    assert listed["b.broken"]["problem"] == "invalid cron: wrong number of fields"
    assert listed["b.broken"]["next_fire"] is None and listed["b.broken"]["status"] == "broken"


def test_show_of_a_schedule_with_an_invalid_cron_says_so(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`schedules show` of the broken schedule prints its facts with the problem, exit 0."""
    add_schedule(dsn, "b.broken", "61 * * * *")
    code, printed, err = cli(capsys, "schedules", "show", "b.broken", "--dsn", dsn)
    assert code == 0, err
    assert "invalid cron: bad minute" in printed and "Traceback" not in printed + err
    code, printed, _ = cli(capsys, "schedules", "show", "b.broken", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(printed)["schedule"]["problem"] == "invalid cron: bad minute"
