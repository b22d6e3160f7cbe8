"""`tenure schedules resume` records who resumed a schedule, when and why, as a pause is
recorded, and `list` and `show` say so."""

from __future__ import annotations

import json

import pytest
from _ops import cli, sql

from tenure.model.actor import default_actor
from tenure.ops.cli._common import out as console


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as a wide terminal shows them, so no cell is cut."""
    monkeypatch.setattr(console, "width", 240)


def resume_record(dsn: str, name: str) -> tuple[object, ...]:
    [row] = sql(
        dsn,
        "SELECT resumed_by, resume_reason, resumed_at IS NOT NULL FROM tenure.schedules WHERE name = %s",
        (name,),
    )
    return row


def test_resume_records_the_actor_and_reason_and_list_and_show_say_so(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resumed with --actor and --reason, the schedule keeps both with the time; `list` shows the
    resume in its status, `show` on its own line, --json as fields."""
    sql(
        dsn,
        "INSERT INTO tenure.schedules (name, task, queue, cron, timezone, last_slot) "
        "VALUES ('nightly', 'app.report', 'reports', '0 3 * * *', 'UTC', now())",
    )
    assert cli(capsys, "schedules", "pause", "nightly", "--reason", "month end", "--dsn", dsn)[0] == 0
    code, printed, err = cli(
        capsys,
        "schedules",
        "resume",
        "nightly",
        "--reason",
        "books closed",
        "--actor",
        "ops-bob",
        "--dsn",
        dsn,
    )
    assert code == 0, err
    assert resume_record(dsn, "nightly") == ("ops-bob", "books closed", True)
    code, printed, _ = cli(capsys, "schedules", "list", "--dsn", dsn)
    assert code == 0 and "resumed" in printed and "by ops-bob" in printed
    code, printed, _ = cli(capsys, "schedules", "show", "nightly", "--dsn", dsn)
    assert code == 0 and "by ops-bob: books closed" in printed
    code, printed, _ = cli(capsys, "schedules", "list", "--dsn", dsn, "--json")
    [listed] = json.loads(printed)
    assert (listed["resumed_by"], listed["resume_reason"]) == ("ops-bob", "books closed")
    assert listed["resumed_at"] is not None


def test_resume_without_an_actor_records_the_user_at_host(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With neither --actor nor --reason, the resume is still recorded: as user@host, no reason."""
    sql(
        dsn,
        "INSERT INTO tenure.schedules (name, task, queue, cron, timezone, last_slot) "
        "VALUES ('nightly', 'app.report', 'reports', '0 3 * * *', 'UTC', now())",
    )
    assert cli(capsys, "schedules", "pause", "nightly", "--reason", "month end", "--dsn", dsn)[0] == 0
    assert cli(capsys, "schedules", "resume", "nightly", "--dsn", dsn)[0] == 0
    assert resume_record(dsn, "nightly") == (default_actor(), None, True)
