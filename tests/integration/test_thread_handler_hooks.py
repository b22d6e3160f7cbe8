"""Hooks around plain-function handlers (`around_thread_handlers`): entered and exited in the
handler's own thread, once per attempt, even when the handler raises; an error of theirs is the
handler's; async handlers run without them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _inprocess import FAST, running, wait_state
from psycopg import AsyncConnection

from tenure import JobContext, Tenure
from tenure.worker.executor import around_thread_handlers


class Recorder:
    """A hook that records, per job, the thread each of its enters, the handler and its exits ran in."""

    def __init__(self, fail_on_enter: bool = False) -> None:
        self.fail_on_enter = fail_on_enter
        self.lock = threading.Lock()
        self.calls: list[tuple[str, int]] = []

    def note(self, what: str) -> None:
        with self.lock:
            self.calls.append((what, threading.get_ident()))

    @contextlib.contextmanager
    def hook(self) -> Iterator[None]:
        self.note("enter")
        if self.fail_on_enter:
            raise RuntimeError("the hook refused")
        try:
            yield
        finally:
            self.note("exit")


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    remove = around_thread_handlers(recorder.hook)
    yield recorder
    remove()


async def test_hook_wraps_each_thread_handler_in_its_own_thread(
    dsn: str, db: AsyncConnection[Any], recorder: Recorder
) -> None:
    """Each plain-function job runs enter, handler, exit in that order, all in the handler's thread."""
    app = Tenure(dsn)

    @app.task(name="plain")
    def plain(ctx: JobContext, n: int) -> int:
        recorder.note(f"handler {n}")
        return n

    async with running(app, concurrency=2):
        jobs = [await app.enqueue("plain", {"n": n}) for n in range(4)]
        for job in jobs:
            row = await wait_state(db, job.id, "succeeded")
            assert row["attempt_count"] == 1
    by_thread: dict[int, list[str]] = {}
    for what, thread in recorder.calls:
        by_thread.setdefault(thread, []).append(what)
    assert threading.get_ident() not in by_thread, "a hook ran in the event loop's thread"
    runs = [calls[i : i + 3] for calls in by_thread.values() for i in range(0, len(calls), 3)]
    assert sorted(run[1] for run in runs) == [f"handler {n}" for n in range(4)]
    assert all(run[0] == "enter" and run[2] == "exit" for run in runs), by_thread


async def test_hook_exits_when_the_handler_raises_and_the_error_stays_the_handlers(
    dsn: str, db: AsyncConnection[Any], recorder: Recorder
) -> None:
    """A handler that raises still has the hook exited in its thread; the job records its own error."""
    app = Tenure(dsn)

    @app.task(name="broken", max_attempts=1)
    def broken(ctx: JobContext) -> None:
        recorder.note("handler")
        raise ValueError("the handler's own error")

    async with running(app):
        job = await app.enqueue("broken")
        row = await wait_state(db, job.id, "dead")
    assert "the handler's own error" in row["last_error"]
    assert [what for what, _ in recorder.calls] == ["enter", "handler", "exit"]
    assert len({thread for _, thread in recorder.calls}) == 1


async def test_hook_runs_again_for_each_attempt(
    dsn: str, db: AsyncConnection[Any], recorder: Recorder
) -> None:
    """A retried job is wrapped again at every attempt, so a hook can put right what the last left."""
    app = Tenure(dsn)

    @app.task(name="flaky", max_attempts=3, backoff=FAST)
    def flaky(ctx: JobContext) -> int:
        recorder.note(f"attempt {ctx.attempt}")
        if ctx.attempt < 3:
            raise ConnectionError("dropped")
        return ctx.attempt

    async with running(app):
        job = await app.enqueue("flaky")
        row = await wait_state(db, job.id, "succeeded", timeout=30)
    assert row["attempt_count"] == 3
    assert [what for what, _ in recorder.calls] == [
        *("enter", "attempt 1", "exit"),
        *("enter", "attempt 2", "exit"),
        *("enter", "attempt 3", "exit"),
    ]


async def test_a_hook_that_raises_fails_the_attempt_before_the_handler_runs(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A hook that raises on entry keeps the handler from running, and the job records the hook's error."""
    app = Tenure(dsn)
    ran: list[int] = []

    @app.task(name="guarded", max_attempts=1)
    def guarded(ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    refusing = Recorder(fail_on_enter=True)
    remove = around_thread_handlers(refusing.hook)
    try:
        async with running(app):
            job = await app.enqueue("guarded")
            row = await wait_state(db, job.id, "dead")
    finally:
        remove()
    assert ran == []
    assert "the hook refused" in row["last_error"]


async def test_async_handlers_run_without_thread_hooks(
    dsn: str, db: AsyncConnection[Any], recorder: Recorder
) -> None:
    """An async handler runs in the event loop, not a thread, so no thread hook wraps it."""
    app = Tenure(dsn)

    @app.task(name="coroutine")
    async def coroutine(ctx: JobContext) -> None:
        recorder.note("handler")

    async with running(app):
        job = await app.enqueue("coroutine")
        await wait_state(db, job.id, "succeeded")
    assert [what for what, _ in recorder.calls] == ["handler"]


def test_registering_a_hook_twice_wraps_once_and_removal_unregisters() -> None:
    """The same hook registered twice is entered once per handler; its remover takes it away."""
    from tenure.worker import executor

    recorder = Recorder()
    remove = around_thread_handlers(recorder.hook)
    again = around_thread_handlers(recorder.hook)
    try:
        assert executor._thread_hooks.count(recorder.hook) == 1
    finally:
        remove()
        again()
    assert recorder.hook not in executor._thread_hooks
