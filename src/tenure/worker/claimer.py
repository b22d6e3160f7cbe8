"""The claim loop: free slots -> batch claim, woken by notifications or a poll interval."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from tenure.db import wakeups
from tenure.db.control_queries import ControlQueries
from tenure.db.producer_queries import OFFERS_ASKED_AGAIN
from tenure.db.queries import Queries, TaskLeasePolicy
from tenure.model.jobs import ClaimedJob
from tenure.tasks import TaskRegistry
from tenure.telemetry.tracing import batch_span, set_batch_size
from tenure.worker.executor import EAGER_TASKS, Executor
from tenure.worker.handed import HandedJobs
from tenure.worker.health import describe_error
from tenure.worker.kept_connection import KeptConnection
from tenure.worker.offer import Offer
from tenure.worker.oldest_share import OldestShare
from tenure.worker.options import WorkerOptions
from tenure.worker.service import Service, set_within
from tenure.worker.services import WorkerServices

log = logging.getLogger("tenure.worker")

#: Longest a freed slot waits for others before it is refilled on its own (seconds).
REFILL_DELAY = 0.005
#: How often the claimer reads which queues are limited (seconds).
LIMITS_REFRESH = 2.0
#: After one queue's claim failed n times in a row, that queue is left out of claim passes for
#: min(QUEUE_BACKOFF_CAP, 0.1 * 2**n) seconds; the other queues go on being claimed meanwhile.
QUEUE_BACKOFF_CAP = 5.0


def claim_terms(registry: TaskRegistry, options: WorkerOptions) -> tuple[list[str], list[TaskLeasePolicy]]:
    """The tasks a worker of `registry` claims, and the lease and runtime of each one whose own
    differ from the worker's (the claim gives every other task the worker's, without looking it
    up). Only tasks it can run: a job of a task registered elsewhere (a mixed-version deploy) is
    left for a worker that has it, with no attempt spent. tenure.testing claims on the same terms."""
    tasks = sorted(t.name for t in registry)
    defaults = (options.lease_seconds, options.max_runtime_seconds)
    policies = [
        TaskLeasePolicy(
            t.name,
            t.policy.lease_seconds or options.lease_seconds,
            t.policy.max_runtime_seconds or options.max_runtime_seconds,
        )
        for t in registry
    ]
    return tasks, [p for p in policies if (p.lease_seconds, p.max_runtime_seconds) != defaults]


@dataclass(frozen=True)
class ClaimTerms:
    """The claim statement on a worker's terms: its owner, the tasks it runs and their leases
    (claim_terms). The claimer claims on them, and so does tenure.testing's runner, as a worker of
    the app would."""

    owner: str
    options: WorkerOptions
    tasks: list[str]
    policies: list[TaskLeasePolicy]

    @classmethod
    def of(cls, registry: TaskRegistry, options: WorkerOptions, owner: str) -> ClaimTerms:
        return cls(owner, options, *claim_terms(registry, options))

    async def claim(
        self,
        queries: Queries,
        conn: psycopg.AsyncConnection[Any],
        queue: str,
        want: int,
        *,
        oldest: int = 0,
        limited: bool = False,
        only: Sequence[int] | None = None,
        cursor: psycopg.AsyncCursor[Any] | None = None,
    ) -> list[ClaimedJob]:
        return await queries.job_claim(
            conn,
            queue=queue,
            owner=self.owner,
            limit=want,
            default_lease_seconds=self.options.lease_seconds,
            default_runtime_seconds=self.options.max_runtime_seconds,
            policies=self.policies,
            tasks=self.tasks,
            oldest=oldest,
            limited=limited,
            only=only,
            cursor=cursor,
        )


class Claimer(Service):
    """Claims jobs into the worker's free slots: at once when woken (a notification, a freed
    slot), else every poll interval. It waits while completions cannot be written."""

    name = "claimer"

    def __init__(
        self,
        services: WorkerServices,
        executor: Executor,
        queues: list[str],
        stopping: asyncio.Event | None = None,
    ) -> None:
        self.services = services
        self.stopping = stopping or asyncio.Event()
        self._backing_off = False
        self.executor = executor
        self.queues = queues
        self.control = ControlQueries(services.queries.schema)
        self._wake = asyncio.Event()
        #: Held by each claim pass: the claim loop's and a notification's (notified) take turns.
        self._passing = asyncio.Lock()
        #: Set once the claim loop has ended: no pass claims after it.
        self._closed = False
        self._refill_at = max(1, min(services.options.claim_batch, services.options.concurrency // 2))
        self._refill_timer: asyncio.TimerHandle | None = None
        self._follow_up: asyncio.TimerHandle | None = None
        self._noticed_at = 0.0
        self._paced_until = 0.0
        self._next_queue = 0
        self.health = services.health.service(self.name)
        #: Queues with a global limit, as last read; the plain claim takes nothing from a
        #: limited queue, so a limit set since then binds at once and is seen at the next read.
        self.limited: set[str] = set()
        self._limits_read_at = -LIMITS_REFRESH
        self.oldest_share = OldestShare(services.options.oldest_every)
        #: Queues this worker found empty at its last claim, or has claimed since only the few
        #: jobs that arrived one by one (_claim_size).
        self._emptied: set[str] = set()
        #: Queues whose last claims failed: (failures in a row, monotonic time to try again).
        self.failing_queues: dict[str, tuple[int, float]] = {}
        self.terms = ClaimTerms.of(executor.registry, services.options, services.owner)
        #: The claims' own connection (kept_connection.py).
        self.connection = KeptConnection(
            services.pool, services.options.statement_bound, self._warm, services.queries.jobs_pages
        )
        #: This worker's offer of a slot to the next lone job (offer.py), when it makes them, and
        #: what it does with the jobs that take it (handed.py).
        self.offer: Offer | None = None
        self.handed: HandedJobs | None = None
        #: Until when (monotonic) it makes none: the schema or its role had no offers.
        self._no_offers_until = 0.0

    def wake(self) -> None:
        self._wake.set()

    def notified(self) -> Coroutine[Any, Any, int] | None:
        """A job was enqueued on one of this worker's queues. An idle worker claims at once; a
        busy one with its next refill: it claims again as slots free anyway, and under load
        a claim per notification would be a small claim, and a commit, per enqueue.

        An idle worker's claim is returned, for the listener to run in the step in which it heard
        the notification: woken through the claim loop instead, the claim waited for the event
        loop's next turn and for the listener to wait again (0.09 ms of an idle enqueue's latency,
        docs/performance.md). It is the claim loop's own pass (run_once), and takes the same
        turn, so the two never claim at once.

        Either claims once more NOTIFY_COOLDOWN later, for the jobs whose producers left their
        notification out because they had just sent this one (tenure.db.wakeups)."""
        self._noticed_at = self.clock.monotonic()
        claim = self._claim_for_notice(at_once=True)
        if claim is None:
            self._follow_up_soon()
        return claim  # it sets the follow-up once it has claimed: off the path to the handler

    def _follow_up_soon(self) -> None:
        if self._follow_up is None:
            # NOTIFY_COOLDOWN is read at each use: tests lengthen it.
            wait = max(0.0, self._noticed_at + wakeups.NOTIFY_COOLDOWN - self.clock.monotonic())
            self._follow_up = asyncio.get_running_loop().call_later(wait, self._follow_up_due)

    def _claim_for_notice(self, *, at_once: bool = False) -> Coroutine[Any, Any, int] | None:
        if self.executor.busy:
            self._refill_soon()
        elif at_once and self._may_pass_at_once():
            return self._pass_at_once()
        else:
            self._wake.set()
        return None

    def _may_pass_at_once(self) -> bool:
        """Whether a notification's claim may run now, outside the claim loop: no pass under way
        or due (the loop's takes what arrived), none paced for later, no failure being backed
        off, and the claimer neither stopping nor stopped."""
        return not (
            self._passing.locked()
            or self._wake.is_set()
            or self._backing_off
            or self._closed
            or self.stopping.is_set()
            or self._paced_until > self.clock.monotonic()
        )

    async def _pass_at_once(self) -> int:
        """The pass a notification runs; returns how many jobs it claimed."""
        try:
            claimed = await self.run_once()
            if claimed and not EAGER_TASKS:
                # The jobs start in tasks of their own, at the event loop's next turn: they go
                # first, before this sets the follow-up's timer and the listener reads its socket
                # again (Python 3.12 starts them as they are made).
                await asyncio.sleep(0)
            return claimed
        except Exception as exc:
            # The claim loop's next pass tries again, and backs off if that fails too; the
            # listener, which ran this pass, goes on listening.
            log.debug("claim at a notification failed (the claim loop tries again): %s", describe_error(exc))
            self._wake.set()
            return 0
        finally:
            self._follow_up_soon()

    def _follow_up_due(self) -> None:
        self._claim_for_notice()
        # One follow-up timer at a time: a notification that came while it ran gets its own turn.
        wait = self._noticed_at + wakeups.NOTIFY_COOLDOWN - self.clock.monotonic()
        loop = asyncio.get_running_loop()
        self._follow_up = loop.call_later(wait, self._follow_up_due) if wait > 0 else None

    def free_slots(self) -> int:
        """Slots whose handler has returned are free, even while their outcome is written; at
        most `concurrency` such writes wait at once, so a slow write path slows claims down."""
        return min(self._idle_slots(), self._completion_room())

    def _idle_slots(self) -> int:
        return self.services.options.concurrency - self.executor.busy

    def _completion_room(self) -> int:
        """How many more jobs may hold a lease here: their handlers and the writes waiting."""
        return 2 * self.services.options.concurrency - len(self.executor.running)

    def claim_plan(self) -> list[tuple[str, int]]:
        """(queue, slots) to claim, most underserved queue first.

        First each queue up to its weighted share of the slots, then, with what is left, the
        queues already at their share (idle shares are lent out, and won back as slots free).
        """
        options = self.services.options
        if len(self.queues) == 1:  # a queue of its own: its share is every slot, less those busy
            return [(self.queues[0], options.concurrency - self.executor.busy)]
        running: dict[str, int] = dict.fromkeys(self.queues, 0)
        for execution in self.executor.running.values():
            if not execution.handler_done:
                running[execution.job.queue] = running.get(execution.job.queue, 0) + 1
        total_weight = sum(options.weight(q) for q in self.queues)
        start = self._next_queue % len(self.queues)
        self._next_queue += 1
        rotated = self.queues[start:] + self.queues[:start]
        by_need = sorted(rotated, key=lambda q: running[q] / options.weight(q))
        plan: list[tuple[str, int]] = []
        for queue in by_need:
            share = -(-options.concurrency * options.weight(queue) // total_weight)  # ceil
            plan.append((queue, share - running[queue]))
        return plan

    async def claim_once(self) -> int:
        """Claims for free slots, queue by queue in `claim_plan` order. Returns jobs claimed."""
        options = self.services.options
        claimed = 0
        saturated_queue = False
        started = self.clock.monotonic()
        if started - self._limits_read_at >= LIMITS_REFRESH:
            async with self.connection.use() as conn:
                self.limited = {r.queue for r in await self.control.limits(conn)}
            self._limits_read_at = self.clock.monotonic()
        plan = self.claim_plan()
        below_share = [(q, room) for q, room in plan if room > 0]
        at_share = [(q, options.concurrency) for q, room in plan if room <= 0]
        failure: Exception | None = None
        tried = failed = 0
        for queue, room in below_share + at_share:
            free = self.free_slots()
            if free <= 0:
                break
            if self._resting(queue, started):
                continue
            want = self._claim_size(queue, min(free, options.claim_batch, room))
            tried += 1
            try:
                jobs = await self._claim_queue(queue, want)
            except Exception as exc:
                # One queue's claim failing (a lock it timed out on, a row it could not read)
                # costs only that queue: it rests for a backoff while the others are claimed.
                failure, failed = exc, failed + 1
                self._queue_failed(queue, exc)
                continue
            self.failing_queues.pop(queue, None)
            if not jobs or (len(jobs) < want and queue in self._emptied):
                self._emptied.add(queue)  # it found nothing, or took every job it could again
            else:
                self._emptied.discard(queue)
            claimed += len(jobs)
            saturated_queue = saturated_queue or len(jobs) == want
        if failure is not None and failed == tried:
            raise failure  # every queue it tried failed: the claimer itself is failing
        if tried and not claimed and failure is None:
            await self._offer_stands()  # it found its queues empty: the worker is idle
        elif claimed and self.free_slots() <= 0:
            await self._offer_falls()
        if saturated_queue:  # there is more where that came from
            self._refill_soon()
        elif claimed:
            # The queue emptied: jobs are arriving one by one. The next claim waits for the
            # trickle gap (WorkerOptions.trickle_gap) from this one's start, and takes together
            # what arrived meanwhile; otherwise every enqueue's notification would be a claim of
            # one job, and an empty one by every other worker. An idle worker (its last claim
            # found nothing) still claims at once.
            self._paced_until = started + options.trickle_gap
        return claimed

    def _claim_size(self, queue: str, want: int) -> int:
        """How many jobs to claim from `queue` for `want` free slots. A queue found empty (an idle
        worker, notified of a job) is claimed for the jobs before its next oldest one, when there
        are any: that claim asks for no oldest share and runs the by-priority lane alone
        (job_claim_by_priority), where a claim of `want` asks for one whenever `want` reaches
        oldest_every, and runs both lanes for the one job it finds (docs/performance.md,
        twenty-first round). Every claimed job keeps its place in the count, so the oldest share
        is the same. A claim that comes back full is a saturated one: the next follows at once.
        Limited queues are claimed one claim at a time, in full."""
        if queue not in self._emptied or queue in self.limited:
            return want
        return self.oldest_share.before_next(queue, want) or want

    async def _offer_stands(self) -> None:
        """The queues were empty: the worker offers a slot to the next lone job, or renews its
        standing offer (offer.py). Its failure costs only the offer: the claims go on, and the
        next empty pass tries again."""
        offer = self.offer
        if offer is None or self.clock.monotonic() < self._no_offers_until:
            return
        if not offer.may_make(self._idle()):
            return
        try:
            async with self.connection.use() as conn:
                await offer.stand(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege) as exc:
            # A schema before hand-offs (tenure migrate may be running), or a role without them:
            # this worker claims, as before, and asks again a while later.
            log.info("this worker makes no offers for now (%s): its jobs are claimed", describe_error(exc))
            self._no_offers_until = self.clock.monotonic() + OFFERS_ASKED_AGAIN
        except Exception as exc:
            log.debug(
                "the worker's offer was not made (the next idle pass tries again): %s", describe_error(exc)
            )

    async def _offer_falls(self) -> None:
        """The worker's claims filled its slots: it takes back an offer it made while idle, so that
        a lone job goes to an idle worker, or to the queue, rather than to this one's full slots.
        A job that took the offer meanwhile is on its way, and runs here if a slot is free. Its
        failure costs only the offer: it lapses on its own."""
        offer = self.offer
        if offer is None or not offer.standing():
            return
        try:
            async with self.connection.use() as conn:
                await offer.withdraw(conn)
        except Exception as exc:
            log.debug("the offer was not taken back (it lapses on its own): %s", describe_error(exc))

    def _idle(self) -> bool:
        """The worker runs nothing (no handler, not even a thread past its lease, which keeps its
        slot; no outcome still to be written) and its completions land: only such a worker offers
        a slot (offer.py)."""
        executor = self.executor
        return executor.busy == 0 and not executor.running and self.may_claim()

    async def _offer_again(self) -> None:
        """The offer made once the worker's last job's outcome is written, as the claim pass that
        finds the queues empty makes it; in that pass's turn (the kept connection is one at a
        time)."""
        async with self._passing:
            if not self._closed and not self.stopping.is_set():
                await self._offer_stands()

    def start_held(self, job: ClaimedJob, sent_at: float, traced: bool) -> None:
        """Runs a job this worker holds the lease of without having claimed it (a hand-off,
        tenure.worker.handed), as its claims' jobs run."""
        self.executor.start(job, self._slot_freed, sent_at, traced, self._completion_written)

    def may_take(self) -> bool:
        """Whether the worker would claim a job now: it does not stop, has a free slot, and its
        completions land."""
        return not self._closed and not self.stopping.is_set() and self.may_claim()

    async def _warm(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Claims of no jobs, one of each form the plain claim takes (with an oldest share due and
        without): what a new connection runs before it takes over the claims."""
        for oldest in (0, 1):
            await self.terms.claim(self.services.queries, conn, self.queues[0], 0, oldest=oldest)

    async def _claim_queue(self, queue: str, want: int) -> list[ClaimedJob]:
        services = self.services
        with batch_span("claim", queue) as span:
            async with self.connection.use() as conn:
                sent_at = time.monotonic()  # the executor measures leases on the process clock
                claim_started = time.perf_counter()
                jobs = await self.terms.claim(
                    services.queries,
                    conn,
                    queue,
                    want,
                    oldest=self.oldest_share.take(queue, want),
                    limited=queue in self.limited,
                    cursor=self.connection.cursor_for(conn),
                )
            set_batch_size(span, len(jobs))
        self.oldest_share.record(queue, len(jobs))
        services.events.claimed(queue, jobs, time.perf_counter() - claim_started)
        services.stats.claimed += len(jobs)
        traced = span is not None  # a span is made exactly when a tracer would record it
        start, slot_freed, written = self.executor.start, self._slot_freed, self._completion_written
        for job in jobs:
            start(job, slot_freed, sent_at, traced, written)
        return jobs

    def _resting(self, queue: str, now: float) -> bool:
        failing = self.failing_queues.get(queue)
        return failing is not None and now < failing[1]

    def _queue_failed(self, queue: str, exc: Exception) -> None:
        failures = self.failing_queues.get(queue, (0, 0.0))[0] + 1
        rest = min(QUEUE_BACKOFF_CAP, 0.1 * 2.0 ** min(failures, 10))
        self.failing_queues[queue] = (failures, self.clock.monotonic() + rest)
        self.services.stats.claim_errors += 1
        log.warning(
            "claim of queue %s failed (%s in a row; the other queues go on, this one rests %.1fs): %s",
            queue,
            failures,
            rest,
            describe_error(exc),
            exc_info=failures == 1 and not isinstance(exc, psycopg.Error),
        )
        if failures == 1:
            self._refill_soon()  # the slots this queue did not fill may go to the others now

    def _slot_freed(self) -> None:
        # Refill in batches, not one claim per finished job: claim at once when enough slots are
        # free, else a few milliseconds later, by when more have usually freed. A claim per
        # finished job costs a commit per job when jobs finish at different times.
        self._refill_soon()

    def _completion_written(self) -> None:
        # A job's place among the completions waiting is free: that frees a slot only when they
        # had filled up (the bound of free_slots that binds), so only then is it worth a look.
        if not self._wake.is_set() and self._completion_room() <= self._idle_slots():
            self._refill_soon()
        # Idle first: on a busy worker (every completion of a drain) that is one comparison.
        if self.offer is not None and self._idle() and self.offer.due() and not self._closed:
            # The last job's outcome is written: the worker is idle, and offers its slot for the
            # next lone job (offer.py) without waiting for its next poll.
            self.services.in_background(self._offer_again())

    def _refill_soon(self) -> None:
        if self._wake.is_set():
            return  # a claim is due already: it takes every slot free by then
        if self.free_slots() >= self._refill_at:
            self._wake.set()
        elif self._refill_timer is None:
            self._refill_timer = asyncio.get_running_loop().call_later(REFILL_DELAY, self._refill_due)

    def _refill_due(self) -> None:
        self._refill_timer = None
        self._wake.set()

    def may_claim(self) -> bool:
        """Claims wait while completions cannot be written: a job claimed now would run and
        then lose its result, spending an attempt for nothing."""
        return self.free_slots() > 0 and not self.services.health.service("completer").failing

    async def run_once(self) -> int:
        """One claim pass, when the worker has free slots and its completions can be written.
        Returns how many jobs it claimed. One at a time: the claim loop's passes and those a
        notification runs (notified) take turns."""
        async with self._passing:
            if self._closed:
                return 0
            self._backing_off = False
            if (pause := self._paced_until - self.clock.monotonic()) > 0:
                await self.clock.sleep(pause)
            self._wake.clear()
            return await self.claim_once() if self.may_claim() else 0

    def next_delay(self, result: int) -> float:
        if self._wake.is_set() and self.may_claim():
            return 0.0  # woken while it claimed: claim again at once
        return self.services.options.poll_interval

    def failed(self, exc: BaseException) -> float:
        self.services.stats.claim_errors += 1
        self._backing_off = True
        return self.health.backoff()

    async def stopped(self) -> None:
        # A pass a notification began before the worker began to stop ends first, and none
        # claims after: jobs are claimed only while the worker will start them.
        async with self._passing:
            self._closed = True
        if self.handed is not None:
            self.offer = None
            await self.handed.withdraw()
        await self.connection.release()

    async def wait(self, delay: float) -> None:
        """Until woken or `delay` passes; after a failure, the whole backoff (a notification
        must not cut it short), unless the worker stops."""
        await set_within(self.stopping if self._backing_off else self._wake, delay)
