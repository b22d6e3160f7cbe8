"""Fixtures of the boundary tests: an app on the test's database, in-process workers and real
worker processes, all stopped or killed at teardown even when the test fails."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tenure
from tenure.worker.stats import WorkerStats

HERE = Path(__file__).resolve().parent
for _path in (str(HERE), str(HERE.parent)):  # _harness, and apps/ for worker processes
    if _path not in sys.path:
        sys.path.insert(0, _path)

from _harness import WorkerProcess, spawn_worker_process  # noqa: E402


@pytest.fixture
async def app(dsn: str) -> AsyncIterator[tenure.Tenure]:
    """A Tenure app bound to this test's database; tests register their own tasks on it."""
    application = tenure.Tenure(dsn)
    yield application
    await application.close()


class InProcessWorkers:
    """Starts in-process workers (`await start_worker(app, lease_seconds=1, ...)`) and stops them."""

    def __init__(self) -> None:
        self.tasks: dict[int, asyncio.Task[Any]] = {}
        self.workers: list[tenure.Worker] = []

    async def __call__(self, application: tenure.Tenure, **options: Any) -> tenure.Worker:
        worker = application.worker(**options)
        task = asyncio.create_task(worker.run(), name=f"test-worker-{len(self.workers)}")
        self.workers.append(worker)
        self.tasks[id(worker)] = task
        started = asyncio.create_task(worker.started.wait())
        await asyncio.wait({started, task}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if task.done():
            task.result()  # raises the start-up error
        assert worker.started.is_set(), "worker did not start within 30s"
        return worker

    async def stop(self, worker: tenure.Worker, *, timeout: float, force: bool = False) -> WorkerStats:
        """Stops one worker and fails the test if it does not exit within `timeout` seconds."""
        worker.stop(force=force)
        try:
            stats: WorkerStats = await asyncio.wait_for(self.tasks[id(worker)], timeout=timeout)
        except TimeoutError:
            raise AssertionError(f"the worker did not stop within {timeout}s") from None
        return stats

    async def close(self) -> None:
        for worker in self.workers:
            worker.stop(force=True)
        for task in self.tasks.values():
            try:
                await asyncio.wait_for(task, timeout=15)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            except BaseException:  # the test already reported what matters
                pass


@pytest.fixture
async def start_worker() -> AsyncIterator[InProcessWorkers]:
    """In-process workers on this test's event loop, all stopped at teardown."""
    workers = InProcessWorkers()
    yield workers
    await workers.close()


@pytest.fixture
def marker_dir(tmp_path: Path) -> Path:
    """Where worker-process handlers leave their start/finish markers."""
    path = tmp_path / "markers"
    path.mkdir()
    return path


SpawnWorker = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker(dsn: str, tmp_path: Path) -> Iterator[SpawnWorker]:
    """Starts `tenure worker apps.boundary_app` processes on this test's database; every one
    is killed at teardown, paused or not, whatever the test's outcome."""
    procs: list[WorkerProcess] = []

    def spawn(worker_id: str, *, lease: float, extra: tuple[str, ...] = (), **options: Any) -> WorkerProcess:
        proc = spawn_worker_process(dsn, tmp_path, worker_id, lease=lease, extra=extra, **options)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.cleanup()
