"""The garbage collector of a process a worker owns: its youngest generation's threshold is raised
above a claim's burst while the worker runs and put back after it; a worker run inside another
program leaves the collector as it was."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from tenure import JobContext, Tenure, WorkerOptions
from tenure.worker.collector import YOUNG_THRESHOLD, young_generation_widened


@pytest.fixture
def default_threshold() -> Iterator[tuple[int, int, int]]:
    """Python's default thresholds for the test, and whatever the process had put back after it."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


def test_the_young_threshold_is_raised_inside_the_block_and_put_back_after(
    default_threshold: tuple[int, int, int],
) -> None:
    """Inside: the youngest generation waits for YOUNG_THRESHOLD containers, the older ones as before."""
    with young_generation_widened():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == default_threshold


def test_a_higher_threshold_and_a_disabled_collector_are_kept(
    default_threshold: tuple[int, int, int],
) -> None:
    """A program that already collects less often, or not at all (threshold 0), keeps its choice."""
    for young in (YOUNG_THRESHOLD * 5, 0):
        gc.set_threshold(young, 10, 10)
        with young_generation_widened():
            assert gc.get_threshold()[0] == young
        assert gc.get_threshold()[0] == young


def test_a_threshold_set_inside_the_block_is_not_undone(default_threshold: tuple[int, int, int]) -> None:
    """Something else that sets its own threshold while the worker runs keeps it after."""
    with young_generation_widened():
        gc.set_threshold(1234, 10, 10)
    assert gc.get_threshold()[0] == 1234


def test_the_block_puts_the_threshold_back_when_it_raises(default_threshold: tuple[int, int, int]) -> None:
    """A worker that stops with an error still puts the program's threshold back."""
    with pytest.raises(RuntimeError), young_generation_widened():
        raise RuntimeError("stopped")
    assert gc.get_threshold() == default_threshold


@pytest.mark.parametrize("owns_process", [True, False])
async def test_a_worker_widens_the_collector_only_while_it_owns_the_process(
    dsn: str, default_threshold: tuple[int, int, int], owns_process: bool
) -> None:
    """run(handle_signals=True) runs its jobs with the young threshold raised and puts it back when it
    returns; run() leaves the program's collector alone."""
    app = Tenure(dsn)
    seen: list[int] = []
    ran = asyncio.Event()

    @app.task(name="look")
    async def look(ctx: JobContext) -> None:
        seen.append(gc.get_threshold()[0])
        ran.set()

    await app.enqueue(look, {})
    worker = app.worker(WorkerOptions(poll_interval=0.05, shutdown_grace=2.0))
    run = asyncio.create_task(worker.run(handle_signals=owns_process))
    try:
        await asyncio.wait_for(ran.wait(), 10)
    finally:
        worker.stop()
        await asyncio.wait_for(run, 15)
        await app.close()
    assert seen == [YOUNG_THRESHOLD if owns_process else default_threshold[0]]
    assert gc.get_threshold() == default_threshold
