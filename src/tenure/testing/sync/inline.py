# Generated from src/tenure/testing/inline.py by tools/async_to_sync.py: do not edit.
# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs
# from what the source gives.
"""`Inline`: an app's jobs run in the test, on demand, and assertions on what was enqueued.

Written once, async; tools/async_to_sync.py writes its blocking twin, `SyncInline`
(tenure.testing.sync.inline), for Django, Flask and any test without an event loop. The twin
runs the worker's executor on a loop thread of its own.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from tenure.model.jobs import Job
from tenure.producer.sync_client import SyncClient
from tenure.tasks import AnyTask
from tenure.testing.matching import DEFAULT_WITHIN, EVERY_STATE, WAITING, Expected, listing
from tenure.testing.outcome import Ran
from tenure.testing.runner import JobRunner

if TYPE_CHECKING:
    from tenure.app import Tenure


from tenure.testing.loop_thread import LoopThread

T = TypeVar("T")


class SyncInline:
    """Runs an app's jobs in the test's own process, one at a time, on demand: each through the
    worker's claim statement (a real lease and fencing token), its executor and its fenced
    outcome. Only the loops are missing: nothing claims on its own, and nothing runs in the
    background but the completer that writes outcomes."""

    def __init__(self, app: Tenure, *, lease_seconds: float = 30.0) -> None:
        self.app = app
        self._runner = JobRunner(app, lease_seconds=lease_seconds)
        self._loop = LoopThread("tenure-testing-loop")

    @property
    def client(self) -> SyncClient:
        """The app's client the assertions read through."""
        return self.app.sync_client

    def _step(self, step: Coroutine[Any, Any, T]) -> T:
        """A step of the runner: awaited here, run on the loop thread by the blocking twin."""
        return self._loop.run(step)

    def __enter__(self) -> SyncInline:
        self._loop.start()
        self._step(self._runner.open())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._step(self._runner.close())
        finally:
            self._loop.stop()

    # -- what was enqueued --------------------------------------------------------------------

    def enqueued(
        self,
        task: str | AnyTask | None = None,
        *,
        args: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        within: float | timedelta = DEFAULT_WITHIN,
        state: str | Sequence[str] = WAITING,
        **payload: Any,
    ) -> list[Job]:
        """The jobs of `task` (any, when None) whose arguments hold `args` and the keyword
        arguments given, and whose options are those given: `queue`, `priority`, `run_at` (give
        or take `within`, a second by default) and `state` (one or several; waiting by
        default). Oldest first."""
        expected = Expected.of(
            task, args, payload, queue=queue, priority=priority, run_at=run_at, within=within, state=state
        )
        return self._matching(expected)

    def _matching(self, expected: Expected) -> list[Job]:
        found = self.client.find_jobs(
            expected.task, queue=expected.queue, states=expected.states, contains=expected.args or None
        )
        return [job for job in found if expected.matches(job)]

    def assert_enqueued(
        self,
        task: str | AnyTask,
        *,
        args: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        within: float | timedelta = DEFAULT_WITHIN,
        state: str | Sequence[str] = WAITING,
        count: int | None = None,
        **payload: Any,
    ) -> list[Job]:
        """The jobs `enqueued` finds with these arguments and options, at least one (exactly
        `count`, when given); else AssertionError, listing the jobs of the task there are."""
        expected = Expected.of(
            task, args, payload, queue=queue, priority=priority, run_at=run_at, within=within, state=state
        )
        found = self._matching(expected)
        if (count is None and found) or len(found) == count:
            return found
        want = "a" if count is None else f"{count} x"
        raise AssertionError(
            f"expected {want} {expected.describe()}, found {len(found)}; the task's jobs:\n"
            + listing(self.client.find_jobs(expected.task, states=EVERY_STATE))
        )

    def refute_enqueued(
        self,
        task: str | AnyTask,
        *,
        args: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        within: float | timedelta = DEFAULT_WITHIN,
        state: str | Sequence[str] = WAITING,
        **payload: Any,
    ) -> None:
        """AssertionError, listing them, when jobs `enqueued` would find with these arguments
        and options exist."""
        expected = Expected.of(
            task, args, payload, queue=queue, priority=priority, run_at=run_at, within=within, state=state
        )
        found = self._matching(expected)
        if found:
            raise AssertionError(f"expected no {expected.describe()}, found {len(found)}:\n" + listing(found))

    # -- running jobs ---------------------------------------------------------------------------

    def run_job(self, job_id: int) -> Ran:
        """Claims that one job and runs it now; returns it as its outcome left it. The job must
        be pending, of a task the app registers, and one a worker of the app could claim now:
        otherwise ValidationError says why not (its queue paused, another worker took it, ...)."""
        return self._step(self._runner.run_job(job_id))

    def perform(self, task: AnyTask, /, **payload: Any) -> Ran:
        """Enqueues a job of `task` with these arguments and runs it at once."""
        enqueued = self.client.enqueue(task, payload)
        return self.run_job(enqueued.id)

    def drain(self, queue: str | None = None, *, limit: int = 1000) -> list[Ran]:
        """Runs the due jobs of the app's tasks on `queue` (every queue, when None), one at a
        time, queue by queue in the order a worker claims each, until none is due: the jobs they
        enqueue, retries due at once and workflow steps they release run too. A job of a task the
        app does not register is left alone, as a worker of the app leaves it. At most `limit`
        runs."""
        runs: list[Ran] = []
        while len(runs) < limit:
            before = len(runs)
            self._step(self._runner.workflow_work())
            for name in self._step(self._runner.due_queues(queue)):
                while len(runs) < limit:
                    ran = self._step(self._runner.run_next(name))
                    if ran is None:
                        break
                    runs.append(ran)
            if len(runs) == before:
                break
        return runs

    def pass_time(self, after: timedelta) -> int:
        """Ends, timed out, every wait (`ctx.wait_for`'s timeout, `ctx.sleep`, a workflow step's
        `Elapsed` condition) whose deadline falls within `after` from now, as if that time had
        passed: the jobs are pending (or skipped, or cancelled, as a step's condition says), to run
        with `run_job`, `drain` or `run_workflow`. Nothing sleeps. Returns how many waits it ended.
        A signal needs no helper: send it with `app.signal` and run the job."""
        return self._step(self._runner.end_waits_within(after))

    def run_workflow(self, workflow_id: int, *, steps: int | None = None) -> list[Ran]:
        """Runs the workflow's released steps that are due, each once, and the steps they release
        in turn, until none is left to run or `steps` have run (one at a time: steps=1 is one
        step). Returns what ran, in order."""
        runs: list[Ran] = []
        while steps is None or len(runs) < steps:
            self._step(self._runner.workflow_work())
            ready = [s for s in self.client.workflow_steps(workflow_id) if s.shown_state == "pending"]
            if not ready:
                break
            runs.append(self.run_job(ready[0].job_id))
        return runs
