"""`tenure workflows list|show|cancel|retry`: what each shows of a workflow's steps, and that bad
input exits non-zero with a clear message and changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tenure import Permanent, Tenure, Workflow
from tenure.ops.cli import main
from tenure.ops.cli._common import out as console
from tenure.testing import Inline


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables as a wide terminal shows them, so no cell is cut."""
    monkeypatch.setattr(console, "width", 200)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _enqueue(dsn: str) -> int:
    app = Tenure(dsn)
    wf = Workflow("nightly import")
    fetched = wf.step(app.registry.register(_noop, name="cli.fetch", queue="cli"), name="fetch")
    rows = wf.group(
        [app.registry.register(_noop, name="cli.row", queue="cli")] * 2, after=fetched, name="row"
    )
    wf.step(app.registry.register(_noop, name="cli.sum", queue="cli"), after=rows, name="sum")
    run = app.enqueue_workflow_sync(wf)
    app.close_sync()
    return run.id


async def _noop(ctx: object) -> None:
    return None


def test_list_and_show_give_each_step_its_state_and_what_it_waits_for(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh fan-out: the list counts one queued and three waiting steps; show names each
    step's dependencies and how many are still to succeed; --json carries the same."""
    workflow_id = _enqueue(dsn)
    code, listed, _ = run(capsys, "workflows", "list", "--dsn", dsn)
    assert code == 0
    assert "nightly import" in listed and "0/4 succeeded, 1 queued, 3 waiting" in listed
    code, shown, _ = run(capsys, "workflows", "show", str(workflow_id), "--dsn", dsn)
    assert code == 0
    lines = {line.split("│")[1].strip(): line for line in shown.splitlines() if line.count("│") > 5}
    assert "pending" in lines["fetch"]
    assert "waiting" in lines["row-1"] and "1 of 1 to succeed" in lines["row-1"]
    assert "row-1, row-2" in lines["sum"] and "2 of 2 to succeed" in lines["sum"]
    code, text, _ = run(capsys, "workflows", "show", str(workflow_id), "--dsn", dsn, "--json")
    data = json.loads(text)
    assert data["workflow"]["state"] == "running"
    assert [s["after"] for s in data["steps"]] == [[], ["fetch"], ["fetch"], ["row-1", "row-2"]]


def test_show_says_what_a_steps_condition_waits_for_and_how_it_ended(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step waiting on its condition is counted waiting, and show says what runs or cancels it
    and since when; once signalled, how its condition ended."""
    from datetime import timedelta

    from tenure import Elapsed, Signalled

    app = Tenure(dsn)
    wf = Workflow("approval")
    wf.step(
        app.registry.register(_noop, name="cli.charge", queue="cli"),
        name="charge",
        wait_for=Signalled("approve:1"),
        cancel_if=Elapsed(timedelta(days=3)),
    )
    made = app.enqueue_workflow_sync(wf)
    code, listed, _ = run(capsys, "workflows", "list", "--dsn", dsn)
    assert code == 0 and "0/1 succeeded, 1 waiting" in listed
    code, shown, _ = run(capsys, "workflows", "show", str(made.id), "--dsn", dsn)
    assert code == 0
    text = " ".join(shown.split())
    assert "a signal to approve:1 runs it; after 3 days it is cancelled, waiting since" in text
    app.signal_sync("approve:1", {"ok": True})
    app.close_sync()
    code, shown, _ = run(capsys, "workflows", "show", str(made.id), "--dsn", dsn)
    assert "its condition: signalled" in " ".join(shown.split())
    code, text, _ = run(capsys, "workflows", "show", str(made.id), "--dsn", dsn, "--json")
    [step] = json.loads(text)["steps"]
    assert step["condition"] == {
        "key": "approve:1",
        "seconds": 259200,
        "on_signal": "resume",
        "on_deadline": "cancel",
    }
    assert step["condition_state"] == "signalled"


def test_cancel_takes_every_step_and_a_second_cancel_or_a_retry_changes_nothing(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cancel says what it cancelled; show then lists every step cancelled; cancelling again
    says so with exit 0; retrying a cancelled workflow exits 1; an unknown id exits 1; an empty
    reason exits 2."""
    workflow_id = _enqueue(dsn)
    code, said, _ = run(capsys, "workflows", "cancel", str(workflow_id), "--reason", "bad file", "--dsn", dsn)
    assert code == 0 and "3 waiting steps cancelled, 1 queued or running step jobs" in said
    code, shown, _ = run(capsys, "workflows", "show", str(workflow_id), "--dsn", dsn, "--json")
    assert {s["state"] for s in json.loads(shown)["steps"]} == {"cancelled"}
    code, said, _ = run(capsys, "workflows", "cancel", str(workflow_id), "--reason", "again", "--dsn", dsn)
    assert code == 0 and "already cancelled" in said
    code, _, error = run(capsys, "workflows", "retry", str(workflow_id), "--reason", "why", "--dsn", dsn)
    assert code == 1 and "stays cancelled" in error
    code, _, error = run(capsys, "workflows", "show", "999999", "--dsn", dsn)
    assert code == 1 and "there is no workflow 999999" in error
    code, _, error = run(capsys, "workflows", "cancel", str(workflow_id), "--reason", "  ", "--dsn", dsn)
    assert code == 2 and "--reason is empty" in error


async def _broken(ctx: object) -> None:
    raise Permanent("the input file is gone")


async def _run_to_the_end(app: Tenure, workflow_id: int) -> None:
    async with Inline(app) as inline:
        await inline.run_workflow(workflow_id)


def test_cancelling_a_finished_workflow_is_refused_and_changes_nothing(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workflow whose only step went dead has nothing left to run: cancel exits 1 saying it
    has finished and naming the retry, and the workflow can still be retried (its step's job
    named as a job)."""
    app = Tenure(dsn)
    wf = Workflow("one step")
    wf.step(app.registry.register(_broken, name="cli.broken", queue="cli", max_attempts=1), name="only")
    workflow_id = app.enqueue_workflow_sync(wf).id
    app.close_sync()
    asyncio.run(_run_to_the_end(app, workflow_id))
    code, _, error = run(capsys, "workflows", "cancel", str(workflow_id), "--reason", "late", "--dsn", dsn)
    assert code == 1 and "has finished (0/1 succeeded, 1 dead)" in error
    assert f"tenure workflows retry {workflow_id}" in error
    code, said, _ = run(capsys, "workflows", "retry", str(workflow_id), "--reason", "again", "--dsn", dsn)
    assert code == 0 and f"workflow {workflow_id}: 1 dead step reprocessed (job " in said


def test_tables_written_to_a_pipe_keep_whole_rows(dsn: str) -> None:
    """`tenure workflows list` piped (no terminal, no COLUMNS) lays its table out wider than 80
    columns, so a long workflow name and its step counts are shown whole, not cut."""
    app = Tenure(dsn)
    wf = Workflow("nightly import of the warehouse inventory from every regional supplier feed")
    wf.step(app.registry.register(_noop, name="cli.fetch", queue="cli"), name="fetch")
    app.enqueue_workflow_sync(wf)
    app.close_sync()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    said = subprocess.run(
        [sys.executable, "-m", "tenure", "workflows", "list", "--dsn", dsn],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    ).stdout
    assert "nightly import of the warehouse inventory from every regional supplier feed" in said
    assert "0/1 succeeded, 1 queued" in said
    assert max(len(line) for line in said.splitlines()) > 80
