"""Waits on the command line: `tenure signal`, `tenure waits list|end` and the waits in `tenure
show`, against a real database, with a job made to wait through tenure.testing."""

from __future__ import annotations

import json

import pytest
from _ops import cli, states

import tenure
from tenure.testing import SyncInline


def waiting_job(dsn: str) -> int:
    """A job of the approval task, run once: it waits for `approve:7`, up to an hour."""
    app = tenure.Tenure(dsn)

    @app.task(name="cli.approve")
    def approve(ctx: tenure.JobContext) -> str:
        return ctx.wait_for_sync("approve:7", timeout=3600).outcome

    with SyncInline(app) as t:
        ran = t.perform(approve)
    app.close_sync()
    assert ran.state == "waiting"
    return ran.job.id


def test_waits_list_shows_a_waiting_job_and_end_wakes_it(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """waits list names the waiting job, its key and deadline (JSON too); waits end makes it
    pending with who and why; a second end exits 2 saying the job does not wait."""
    job_id = waiting_job(dsn)
    code, out, _ = cli(capsys, "waits", "list", "--dsn", dsn)
    assert code == 0 and "jobs waiting (1)" in out and "approve:7" in out.replace("\n", "").replace("│", "")
    code, out, _ = cli(capsys, "waits", "list", "--dsn", dsn, "--json")
    listed = json.loads(out)
    assert code == 0 and [w["job_id"] for w in listed["waiting"]] == [job_id]
    assert listed["signals"]["waiting"] == 1
    code, out, _ = cli(capsys, "waits", "end", str(job_id), "--reason", "approved by phone", "--dsn", dsn)
    assert code == 0 and f"job {job_id}: wait 'approve:7' ended" in out
    assert states(dsn)[job_id] == "pending"
    code, _, err = cli(capsys, "waits", "end", str(job_id), "--reason", "again", "--dsn", dsn)
    assert code == 2 and f"job {job_id} is not waiting" in err
    code, out, _ = cli(capsys, "show", str(job_id), "--dsn", dsn)
    assert code == 0 and "approve:7" in out and "ended by" in out


def test_signal_delivers_keeps_deduplicates_and_refuses_bad_input(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal to a waiting job's key wakes it; another is kept; the same idempotency key again
    writes nothing; bad JSON and an empty key exit 2 with the fix, writing nothing."""
    job_id = waiting_job(dsn)
    code, out, _ = cli(capsys, "signal", "approve:7", "--payload", '{"ok": true}', "--dsn", dsn)
    assert code == 0 and f"woke job {job_id}" in out
    assert states(dsn)[job_id] == "pending"
    code, out, _ = cli(capsys, "signal", "later:1", "--idempotency-key", "k1", "--keep", "2d", "--dsn", dsn)
    assert code == 0 and "no job waits for it yet" in out and "2.0d" in out
    code, out, _ = cli(capsys, "signal", "later:1", "--idempotency-key", "k1", "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out)["outcome"] == "duplicate"
    code, _, err = cli(capsys, "signal", "later:2", "--payload", "{bad", "--dsn", dsn)
    assert code == 2 and "--payload is not valid JSON" in err
    code, _, err = cli(capsys, "signal", "", "--dsn", dsn)
    assert code == 2 and "signal key must be a string of 1 to 400" in err
    code, out, _ = cli(capsys, "waits", "list", "--dsn", dsn, "--json")
    assert json.loads(out)["signals"]["kept"] == 1
