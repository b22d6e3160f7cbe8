"""`tenure schedules list|show|pause|resume` on both backends: what it shows of a schedule's last and
next fire, and that bad input exits non-zero with a clear message and changes nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import tenure
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.ops.cli import main
from tenure.ops.cli._common import out as console
from tenure.worker.options import WorkerOptions
from tenure.worker.scheduler import Scheduler
from tenure.worker.services import WorkerServices


def schedule_rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM tenure.schedules ORDER BY name")
        return cur.fetchall()


async def register_and_fire(dsn: str) -> None:
    """Registers 'cli.hourly' and 'cli.every_second' as a worker would, and ticks once 1.1 s later."""
    app = tenure.Tenure(dsn)

    @app.periodic("0 * * * *", name="cli.hourly", timezone="Europe/Berlin")
    def hourly(ctx: tenure.JobContext) -> None:
        pass

    @app.periodic("* * * * * *", name="cli.every_second", missed="skip")
    def every_second(ctx: tenure.JobContext) -> None:
        pass

    pool = await open_pool(dsn, max_size=2)
    services = WorkerServices(
        pool=pool, queries=Queries("tenure"), options=WorkerOptions(worker_id="w1"), dsn=dsn
    )
    try:
        scheduler = Scheduler(services, list(app.registry.schedules.values()))
        await scheduler.register()
        await asyncio.sleep(1.1)
        tick = await scheduler.run_once()
        assert tick.fired.get("cli.every_second"), tick
    finally:
        await services.close()
        await pool.close()


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as a wide terminal shows them, so no cell is cut."""
    monkeypatch.setattr(console, "width", 200)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_shows_last_and_next_fire_and_flags_undeclared_schedules(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`schedules list` shows each schedule's cron, zone, task, queue, last fire and next fire (as
    relative times; JSON with timestamps); one no worker registered for over --stale-after is
    shown as not declared by any running worker, with no next fire."""
    asyncio.run(register_and_fire(dsn))
    code, printed, _ = run(capsys, "schedules", "list", "--dsn", dsn)
    assert code == 0
    assert "cli.hourly" in printed and "Europe/Berlin" in printed and "0 * * * *" in printed
    assert " ago" in printed and "in " in printed
    code, printed, _ = run(capsys, "schedules", "list", "--dsn", dsn, "--json")
    listed = {r["name"]: r for r in json.loads(printed)}
    assert listed["cli.hourly"]["status"] == "active" and listed["cli.hourly"]["last_fired_slot"] is None
    assert listed["cli.hourly"]["next_fire"].endswith(":00:00+00:00")
    second = listed["cli.every_second"]
    assert (second["task"], second["queue"], second["missed"], second["paused"]) == (
        "cli.every_second",
        "default",
        "skip",
        False,
    )
    assert second["last_fired_slot"] is not None and second["next_fire"] > second["last_fired_slot"]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE tenure.schedules SET declared_at = now() - interval '10 minutes' "
            "WHERE name = 'cli.hourly'"
        )
    code, printed, _ = run(capsys, "schedules", "list", "--dsn", dsn, "--json")
    assert {r["name"]: r["status"] for r in json.loads(printed)} == {
        "cli.every_second": "active",
        "cli.hourly": "not declared by any running worker",
    }

    code, printed, _ = run(capsys, "schedules", "show", "cli.every_second", "--dsn", dsn, "--json")
    shown = json.loads(printed)
    assert code == 0 and shown["fires"] and shown["fires"][0]["worker"] == "w1"
    assert shown["fires"][0]["job_state"] == "pending"


def test_pause_and_resume_refuse_bad_input_and_change_nothing(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty reason (exit 2), an unknown schedule (exit 1), a second pause and a resume of a
    schedule that is not paused (exit 1) each say why and leave the rows as they were; a pause
    and a resume with good input take effect and are shown by `list`."""
    asyncio.run(register_and_fire(dsn))
    before = schedule_rows(dsn)
    code, _, error = run(capsys, "schedules", "pause", "cli.hourly", "--reason", "  ", "--dsn", dsn)
    assert code == 2 and "--reason is empty" in error
    code, _, error = run(capsys, "schedules", "pause", "cli.nope", "--reason", "x", "--dsn", dsn)
    assert code == 1 and "there is no schedule named 'cli.nope'" in error
    code, _, error = run(capsys, "schedules", "resume", "cli.hourly", "--dsn", dsn)
    assert code == 1 and "is not paused; nothing was changed" in error
    code, _, error = run(capsys, "schedules", "show", "cli.nope", "--dsn", dsn)
    assert code == 1 and "no schedule named" in error
    assert schedule_rows(dsn) == before

    code, printed, _ = run(
        capsys,
        "schedules",
        "pause",
        "cli.hourly",
        "--reason",
        "supplier down",
        "--actor",
        "ops",
        "--dsn",
        dsn,
    )
    assert code == 0 and "paused" in printed
    paused = schedule_rows(dsn)
    code, _, error = run(capsys, "schedules", "pause", "cli.hourly", "--reason", "again", "--dsn", dsn)
    assert code == 1 and "already paused" in error and "supplier down" in error
    assert schedule_rows(dsn) == paused
    code, printed, _ = run(capsys, "schedules", "list", "--dsn", dsn, "--json")
    hourly = next(r for r in json.loads(printed) if r["name"] == "cli.hourly")
    assert (hourly["status"], hourly["paused_by"], hourly["pause_reason"], hourly["next_fire"]) == (
        "paused",
        "ops",
        "supplier down",
        None,
    )
    code, printed, _ = run(capsys, "schedules", "resume", "cli.hourly", "--dsn", dsn)
    assert code == 0 and "resumed" in printed
    [resumed] = [r for r in schedule_rows(dsn) if r["name"] == "cli.hourly"]
    assert not resumed["paused"] and resumed["pause_reason"] is None
