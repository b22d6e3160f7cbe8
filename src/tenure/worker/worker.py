"""The supervisor: starts the worker's services, handles signals, shuts down gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, conninfo
from psycopg_pool import AsyncConnectionPool

from tenure.db.channels import offer_channel
from tenure.db.connect import resolve_dsn
from tenure.db.control_queries import ControlQueries
from tenure.db.migrate import WORKER_SCHEMA_FLOOR, require_current_schema
from tenure.db.offer_queries import OfferQueries
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.model.errors import DatabaseUnavailable
from tenure.model.validation import check_schema_name
from tenure.tasks import TaskPolicy, TaskRegistry
from tenure.worker.claimer import Claimer
from tenure.worker.collector import young_generation_widened
from tenure.worker.completer import Completer
from tenure.worker.events import Events
from tenure.worker.executor import Executor
from tenure.worker.handed import HandedJobs
from tenure.worker.health import describe_error
from tenure.worker.heartbeat import Heartbeat, Watchdog
from tenure.worker.listener import Listener
from tenure.worker.maintenance import JobsVacuum, RetentionPass, RetentionPolicy, WorkerPresence
from tenure.worker.offer import Offer
from tenure.worker.options import WorkerOptions
from tenure.worker.promoter import Promoter
from tenure.worker.recovery import Recovery
from tenure.worker.revocation import RevocationCheck
from tenure.worker.scheduler import Scheduler
from tenure.worker.service import HealthWatch, Service, Supervisor
from tenure.worker.services import WorkerServices
from tenure.worker.stats import WorkerStats
from tenure.worker.workflow_pass import WorkflowPass

log = logging.getLogger("tenure.worker")

T = TypeVar("T")

#: What libpq and the server say while a primary is being replaced or restarted: worth waiting
#: for. Anything else at start (a refused connection, a wrong password, an unknown host) is a
#: mistake to report at once.
PASSING_AT_START = ("read-only", "starting up", "shutting down", "in recovery")
START_ERRORS = (DatabaseUnavailable, psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)


def _passing(exc: BaseException, dsn: str) -> bool:
    """The database is between primaries or restarting, not misconfigured."""
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return True
    if "," in str(conninfo.conninfo_to_dict(dsn).get("host") or ""):
        # Several hosts: a cluster, whose primary may be down while another is promoted.
        return True
    if isinstance(exc, psycopg.OperationalError):
        return True  # the pool was open: the server answered once, and may again
    # libpq gives no SQLSTATE when no host of the DSN takes writes: its message says why.
    return any(marker in str(exc) for marker in PASSING_AT_START)


class Worker:
    """One worker process's runtime. Run many of them, on many hosts, against one database."""

    def __init__(
        self,
        registry: TaskRegistry,
        *,
        dsn: str | None = None,
        schema: str = "tenure",
        options: WorkerOptions | None = None,
    ) -> None:
        self.registry = registry
        self.schema = check_schema_name(schema)
        self.options = options or WorkerOptions()
        self._dsn = dsn
        self._resolved_dsn = ""  # the DSN the worker runs on, once run() has resolved it
        self.stopping = asyncio.Event()
        self.started = asyncio.Event()
        self.services: WorkerServices | None = None
        self.events = Events()  # subscribe metrics here before run()
        self.retention: RetentionPolicy | None = RetentionPolicy()  # None: this worker never prunes
        self.executor: Executor | None = None
        self.claimer: Claimer | None = None
        self.recovery: Recovery | None = None
        self.promoter: Promoter | None = None
        self.listener: Listener | None = None
        self.revocations: RevocationCheck | None = None
        self.scheduler: Scheduler | None = None
        self._force = False
        #: Why the worker stopped on its own (a critical service kept failing), else None.
        self.failure: str | None = None
        #: Thread handlers still running when the worker stopped: their threads cannot be
        #: stopped from outside, and their jobs keep their leases until those expire.
        self.stuck_threads = 0

    @property
    def stats(self) -> WorkerStats:
        """This worker's counters: jobs claimed, succeeded, retried, dead, ..."""
        return self.services.stats if self.services else WorkerStats()

    @property
    def queues(self) -> list[str]:
        """The queues this worker claims from."""
        return self.options.queues or self.registry.queues() or ["default"]

    def stop(self, *, force: bool = False) -> None:
        """Stops claiming; running jobs get the grace period (none if `force`), then are given back."""
        self._force = self._force or force
        self.stopping.set()
        if self.claimer is not None:
            self.claimer.wake()  # do not sit out the rest of a long poll interval first

    async def run(self, *, handle_signals: bool = False) -> WorkerStats:
        """Runs until `stop` (with `handle_signals`, SIGTERM or SIGINT too) or until a critical
        service keeps failing (`failure` says why); then shuts down as `stop` says, and returns the
        counters. With `handle_signals` the worker owns its process, and while it runs it also sets
        the garbage collector for a worker's bursts of objects (tenure.worker.collector)."""
        dsn = self._resolved_dsn = resolve_dsn(self._dsn).dsn
        pool = await self._when_available(
            lambda: open_pool(dsn, min_size=2, max_size=self.options.concurrency + 4, name="tenure-worker")
        )
        try:
            await self._when_available(lambda: self._declare(pool))
            return await self._run(pool, dsn, handle_signals)
        finally:
            await pool.close()

    async def _when_available(self, start: Callable[[], Awaitable[T]]) -> T:
        """`start()`, tried again while the database cannot serve it yet (no writable primary
        during a failover, a server restarting), as a failing service is, for at most
        `service_failure_limit` seconds: a worker started in the middle of a switchover waits for
        the new primary instead of exiting. Once the database has said it is between primaries or
        restarting, a refused connection that follows (the old primary stopped, the new one not
        up yet) is part of the same passage; a first refusal is a mistake, reported at once."""
        began, pause, passing = time.monotonic(), 0.1, False
        while True:
            try:
                return await start()
            except (
                DatabaseUnavailable,
                psycopg.OperationalError,
                psycopg.errors.ReadOnlySqlTransaction,
            ) as exc:
                passing = passing or _passing(exc, self._resolved_dsn)
                if not passing or time.monotonic() - began >= self.options.service_failure_limit:
                    raise
                log.warning("cannot start yet, trying again in %.1fs: %s", pause, describe_error(exc))
                await asyncio.sleep(pause)
                pause = min(5.0, pause * 2)

    async def _declare(self, pool: AsyncConnectionPool[Any]) -> None:
        """Checks the schema and writes the app's limits (before any claim) and its task catalog."""
        async with pool.connection() as conn:
            await require_current_schema(conn, self.schema, floor=WORKER_SCHEMA_FLOOR)
            control = ControlQueries(self.schema)
            for limit in self.registry.limits.values():
                await control.declare_limit(conn, limit, self.options.worker_id)
            await self._declare_tasks(conn)

    async def _declare_tasks(self, conn: AsyncConnection[Any]) -> None:
        """The task catalog is what enqueue() completes jobs from: a worker runs without it."""
        try:
            await Queries(self.schema).task_policies_declare(
                conn, [task_declaration(t.name, t.policy) for t in self.registry], self.options.worker_id
            )
        except psycopg.errors.UndefinedTable:
            log.info("the schema has no task catalog yet: `tenure migrate` adds it, and enqueue() with it")
        except psycopg.errors.InsufficientPrivilege:
            log.warning(
                "this role may not write the task catalog, so SQL callers of enqueue() get no task "
                "defaults from this worker: apply `tenure roles` again after an upgrade"
            )

    async def _run(self, pool: AsyncConnectionPool[Any], dsn: str, handle_signals: bool) -> WorkerStats:
        services = WorkerServices(
            pool=pool, queries=Queries(self.schema), options=self.options, dsn=dsn, events=self.events
        )
        self.services = services
        if any(not task.is_async for task in self.registry):
            # The thread handlers' blocking pool is opened now, while the worker waits for its
            # database anyway. Opened by the first thread handler to need it, in the middle of a
            # failover, every other handler thread would queue behind that one open, each for
            # the open's whole timeout, long past their leases.
            await self._when_available(lambda: asyncio.to_thread(services.sync_pool))
        threads = ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="tenure-job")
        completer = Completer(services)
        self.executor = executor = Executor(services, self.registry, completer, threads)
        self.claimer = claimer = Claimer(services, executor, self.queues, self.stopping)
        self.recovery = Recovery(services, self.registry)
        self.promoter = promoter = Promoter(services, claimer.wake)
        services.scheduled = promoter.expect
        self.revocations = revocations = RevocationCheck(services, executor)
        board = services.health
        background: list[Service] = [
            completer,
            Heartbeat(services, executor, revocations),
            Watchdog(services, executor),
            self.recovery,
            promoter,
            WorkflowPass(services),
            HealthWatch(board, self._give_up, every=min(1.0, self.options.service_failure_limit / 4)),
            WorkerPresence(
                self.schema,
                board.service(WorkerPresence.name, critical=False),
                worker_id=services.owner,
                queues=self.queues,
                concurrency=self.options.concurrency,
                busy=lambda: len(executor.running),
                connection=services.connection,
                failing=board.failing,
                tasks=claimer.terms.tasks,
            ),
        ]
        if self.retention is not None:
            background.append(
                RetentionPass(
                    pool, self.schema, board.service(RetentionPass.name, critical=False), self.retention
                )
            )
        if self.options.vacuum_check_every is not None:
            background.append(
                JobsVacuum(
                    dsn,
                    self.schema,
                    board.service(JobsVacuum.name, critical=False),
                    connection=services.connection,
                    check_every=self.options.vacuum_check_every,
                )
            )
        if self.registry.schedules:
            schedules = list(self.registry.schedules.values())
            self.scheduler = Scheduler(services, schedules, wake_claimer=claimer.wake)
            background.append(self.scheduler)
        if self.options.listen:
            offer = self._offer(services, claimer)
            if offer is not None:
                claimer.offer = offer
                claimer.handed = HandedJobs(
                    services,
                    offer,
                    start=claimer.start_held,
                    may_take=claimer.may_take,
                    running=lambda: executor.running,
                    room=claimer.free_slots,
                )
            self.listener = Listener(
                self.options.listen_dsn or dsn,
                self.schema,
                set(self.queues),
                claimer.notified,
                health=board.service(Listener.name, critical=False),
                send_probe=lambda payload: self._notify(services, payload),
                poll_interval=self.options.poll_interval,
                scheduled=promoter.expect,
                revoked=revocations.notice,
                offer_channel=None if offer is None else offer.channel,
                handed=None if claimer.handed is None else claimer.handed.heard,
                listening_again=None if claimer.handed is None else claimer.handed.unheard,
            )
            if offer is not None:
                offer.listening = self.listener.hears
            background.append(self.listener)
        supervisor = Supervisor()
        for service in background:
            supervisor.start(service)
        owned = contextlib.ExitStack()
        if handle_signals:  # the worker owns this process: its signals and its collector
            self._install_signal_handlers()
            owned.enter_context(young_generation_widened())
        log.info(
            "worker %s started: queues=%s concurrency=%s lease=%ss event loop=%s",
            services.owner,
            ",".join(self.queues),
            self.options.concurrency,
            self.options.lease_seconds,
            type(asyncio.get_running_loop()).__module__.split(".")[0],
        )
        self.started.set()
        try:
            supervisor.start(claimer, until=self.stopping)
            await supervisor.finish(claimer)
            await self._shutdown(executor, completer)
        finally:
            owned.close()  # first: nothing below may keep the program's collector changed
            await supervisor.close()
            threads.shutdown(wait=False, cancel_futures=True)
            await services.close()
        if self.failure:
            log.error("worker %s stopped: %s", services.owner, self.failure)
        log.info("worker %s stopped: %s", services.owner, services.stats.as_dict())
        return services.stats

    def _offer(self, services: WorkerServices, claimer: Claimer) -> Offer | None:
        """The worker's offer of a slot to the next lone job (tenure.worker.offer), made for the
        tasks it runs on its default lease and runtime; None when it makes none."""
        options = self.options
        if not options.hand_off:
            return None
        own_policies = {p.task for p in claimer.terms.policies}
        return Offer(
            OfferQueries(self.schema),
            worker=services.owner,
            channel=offer_channel(self.schema, services.owner),
            queues=self.queues,
            tasks=[t for t in claimer.terms.tasks if t not in own_policies],
            lease_seconds=options.lease_seconds,
            runtime_seconds=options.max_runtime_seconds,
            poll_interval=options.poll_interval,
            listening=lambda: False,
        )

    @staticmethod
    async def _notify(services: WorkerServices, payload: str) -> None:
        async with services.connection() as conn:
            await services.queries.queue_notify(conn, [payload])

    def _give_up(self, reason: str) -> None:
        """A critical service has failed for too long: stop, to exit non-zero."""
        if self.stopping.is_set():
            return
        self.failure = reason
        log.error("%s; stopping this worker so that its supervisor can restart it", reason)
        self.stop()

    async def _shutdown(self, executor: Executor, completer: Completer) -> None:
        options = self.options
        if executor.running and not self._force:
            log.info("waiting up to %ss for %s running jobs", options.shutdown_grace, len(executor.running))
            # Until each has ended: its task done and its outcome written (a success is written
            # by the completer, still running here, after the task has ended).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.shutdown_grace):
                    while executor.running and not self._force:
                        tasks = [e.task for e in executor.running.values() if e.task and not e.task.done()]
                        if tasks:
                            await asyncio.wait(tasks, timeout=0.05)
                        else:
                            await asyncio.sleep(0.01)
        # Jobs still running after the grace period: async handlers are cancelled; thread
        # handlers are told (LeaseLost at their next ctx.check/ctx.progress) and given a moment.
        unfinished = [e for e in executor.running.values() if not e.ctx.lease_lost and not e.handler_done]
        for execution in unfinished:
            executor.stop_for_shutdown(execution)
        tasks = [e.task for e in unfinished if e.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=min(2.0, options.shutdown_grace))
        await completer.drain()
        # Only a job whose code has stopped may be given back: another worker could otherwise
        # run it while this one's thread still does. The rest keep their lease until it expires.
        stopped = [e for e in unfinished if e.code_stopped]
        if stopped and self.services is not None:
            services = self.services
            try:
                async with services.connection() as conn:
                    released = await services.queries.lease_release_many(
                        conn,
                        owner=services.owner,
                        leases=[(e.job.id, e.job.lease.token) for e in stopped],
                    )
                services.stats.released += len(released)
                log.info("gave back %s unfinished jobs", len(released))
            except Exception as exc:
                log.warning(
                    "could not give back %s unfinished jobs (%s): their leases expire and recovery "
                    "gives them back",
                    len(stopped),
                    describe_error(exc),
                )
        stuck = [e for e in executor.running.values() if not e.code_stopped]
        self.stuck_threads = len(stuck)
        if stuck:
            log.warning(
                "%s thread handlers are still running and cannot be stopped from outside; their "
                "jobs keep their leases until they expire: %s",
                len(stuck),
                ", ".join(str(e.job.id) for e in stuck[:20]),
            )
        for execution in list(executor.running.values()):
            executor.abandon(execution)
        remaining = [e.task for e in executor.running.values() if e.task is not None]
        if remaining:
            await asyncio.wait(remaining, timeout=1.0)

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if self.stopping.is_set():
                log.warning("second %s: giving running jobs back now", signal.Signals(signum).name)
                self.stop(force=True)
            else:
                log.info("%s: finishing running jobs, claiming no more", signal.Signals(signum).name)
                self.stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)


def task_declaration(name: str, policy: TaskPolicy) -> dict[str, Any]:
    """What the task catalog records of a task, for enqueue() to complete its jobs from. A task
    unique by one fixed key has no fields to derive a key from: SQL callers give it."""
    declared: dict[str, Any] = {
        "task": name,
        "queue": policy.queue,
        "priority": policy.priority,
        "max_attempts": policy.max_attempts,
    }
    unique = policy.unique
    if unique is not None and unique.key is None:
        if unique.fields is None:
            declared["unique_whole"] = True
        else:
            declared["unique_fields"] = list(unique.fields)
        declared["unique_states"] = "{" + ",".join(sorted(s.value for s in unique.states)) + "}"
        if unique.period is not None:
            declared["unique_period"] = float(unique.period)
    return declared
