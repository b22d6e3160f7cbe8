"""A RollingDeadline bounds each block as asyncio.timeout does (its own cancellation becomes
TimeoutError, anyone else's stays a cancellation), gives each block its whole time, and keeps one
timer for blocks that come faster than the bound."""

from __future__ import annotations

import asyncio

import pytest

from tenure.worker.rolling_deadline import RollingDeadline


async def bounded(deadline: RollingDeadline, seconds: float) -> None:
    """A block that sleeps `seconds`, ended the way KeptConnection ends its uses."""
    deadline.start()
    try:
        await asyncio.sleep(seconds)
    except BaseException as exc:
        failure = deadline.end(exc)
        if failure is exc:
            raise
        assert failure is not None
        raise failure from exc
    failure = deadline.end(None)
    assert failure is None


async def test_a_block_past_its_deadline_raises_timeout_and_leaves_its_task_uncancelled() -> None:
    """The deadline's own cancellation comes out as TimeoutError, caused by it; the task can go on."""
    deadline = RollingDeadline(0.05)
    with pytest.raises(TimeoutError) as raised:
        await bounded(deadline, 5.0)
    assert isinstance(raised.value.__cause__, asyncio.CancelledError)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await bounded(deadline, 0.0)  # the next block runs


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    """A block cancelled by its caller (a worker stopping) raises CancelledError, not TimeoutError."""
    deadline = RollingDeadline(5.0)
    block = asyncio.create_task(bounded(deadline, 5.0))
    await asyncio.sleep(0.01)
    block.cancel()
    with pytest.raises(asyncio.CancelledError):
        await block


async def test_each_block_gets_its_whole_time_from_its_own_start() -> None:
    """A block begun after an earlier one is not cut short at the earlier one's deadline."""
    deadline = RollingDeadline(0.5)
    await bounded(deadline, 0.0)
    await asyncio.sleep(0.3)
    await bounded(deadline, 0.35)  # runs past the first block's deadline, well within its own


async def test_blocks_faster_than_the_bound_share_one_timer_which_ends_when_they_stop() -> None:
    """Many short blocks make one timer, not one each; once no block is under way when it fires,
    there is none until the next block."""
    deadline = RollingDeadline(1.0)
    await bounded(deadline, 0.0)
    timer = deadline._timer
    assert timer is not None
    for _ in range(50):
        await bounded(deadline, 0.0)
        assert deadline._timer is timer
    await asyncio.sleep(1.1)
    assert deadline._timer is None
