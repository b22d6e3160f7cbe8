"""The examples of external effects work as documented: an idempotent call retried with the same
key, a non-idempotent call reconciled instead of repeated (examples/external_effects.py), and a
downstream store that refuses an older fencing token (examples/fenced_downstream.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

import tenure
from tenure import WorkerOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_external_effects_example_charges_once_and_reconciles_the_sms(dsn: str) -> None:
    """Both interrupted calls end succeeded: 2 charge requests with one key and one charge; one SMS."""
    example = load("external_effects")
    report = await example.main(dsn)
    assert report == {
        "job_states": ["succeeded", "succeeded"],
        "charge_requests": 2,
        "distinct_charge_keys": 1,
        "charges_made": 1,
        "sms_sent": 1,
    }
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute("SELECT name, state, resolved_by FROM tenure.job_effects")
        ).fetchall()
    assert [(n, s) for n, s, _ in rows] == [("sms", "done")] and rows[0][2] is not None


def test_fenced_downstream_store_refuses_an_older_token(dsn: str) -> None:
    """Token 2's output stands; a late write with token 1 is refused and changes nothing."""
    example = load("fenced_downstream")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(example.DDL)
        example.write_output(conn, 7, 1, "first attempt")
        example.write_output(conn, 7, 2, "second attempt")
        with pytest.raises(example.StaleToken, match="token 1 is older"):
            example.write_output(conn, 7, 1, "the paused first attempt, waking up")
        example.write_output(conn, 7, 2, "second attempt, rewritten")  # same token: its own rewrite
        assert conn.execute("SELECT body, fence_token FROM public.report_outputs").fetchall() == [
            ("second attempt, rewritten", 2)
        ]


async def test_fenced_downstream_task_writes_with_its_token(dsn: str) -> None:
    """Run by a worker, the example task writes its output under the attempt's token."""
    example = load("fenced_downstream")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(example.DDL)
    app: tenure.Tenure = example.app
    app.dsn = dsn
    job = await app.enqueue("reports.build", {"report": "q3", "store_dsn": dsn})
    worker = app.worker(WorkerOptions(poll_interval=0.02))
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(250):
            found = await app.client.get_job(job.id)
            if found is not None and found.state.is_terminal:
                break
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await app.close()
    assert found is not None and found.state.value == "succeeded"
    with psycopg.connect(dsn) as conn:
        rows: list[Any] = conn.execute(
            "SELECT job_id, body, fence_token FROM public.report_outputs"
        ).fetchall()
    assert rows == [(job.id, "report q3, built by attempt 1", 1)]
