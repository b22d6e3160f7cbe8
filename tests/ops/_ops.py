"""Helpers of the operations tests: the CLI in-process, raw SQL for setup, a worker run until
a condition holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import tenure
from tenure.ops.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Runs `tenure ARGS` in-process: (exit code, stdout, stderr with its line wrapping undone)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refusing an argument
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, " ".join(captured.err.split())


def sql(dsn: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def states(dsn: str) -> dict[int, str]:
    return {r[0]: r[1] for r in sql(dsn, "SELECT id, state::text FROM tenure.jobs ORDER BY id")}


def run_worker_until(
    app: tenure.Tenure, done: Callable[[], bool], *, timeout: float = 30.0, **options: Any
) -> None:
    """Runs an in-process worker of `app` until `done()` holds; fails after `timeout` seconds."""

    async def go() -> None:
        worker = app.worker(poll_interval=0.05, **options)
        running = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + timeout
            while not await asyncio.to_thread(done):
                if running.done():
                    running.result()
                if time.monotonic() > deadline:
                    raise AssertionError(f"worker did not reach the expected state in {timeout}s")
                await asyncio.sleep(0.05)
        finally:
            worker.stop(force=True)
            await asyncio.wait_for(running, 30)
            await app.close()

    asyncio.run(go())
