"""The soak's fault schedule: one real fault after another, in rotation, until the load ends.

Every fault is real: signals to real processes, sessions killed by the server, the server itself
restarted, packets dropped by the kernel, a snapshot held by another session. Faults run one at a
time so that each one's effect can be read from the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg import IsolationLevel

from tenure import Client, ConfigurationError, ControlRefused, JobState, TenureError
from tenure.db.connect import connect
from tenure.lab.soak.app import QUEUE as SOAK_QUEUE
from tenure.lab.soak.app import Kind
from tenure.lab.soak.attempts import host_clock
from tenure.lab.soak.edge_faults import BadRows, ForgedRequests, PendingLocks, SchemaUpgrade
from tenure.lab.soak.fleet import SoakFleet
from tenure.lab.soak.network import WorkerNetwork
from tenure.lab.soak.operator import act_outcome
from tenure.lab.soak.orm import ORM_SUFFIX
from tenure.lab.soak.poison import PoisonCompletions
from tenure.lab.soak.queries import SoakQueries
from tenure.lab.soak.report import Check
from tenure.lab.soak.roles import set_read_only
from tenure.lab.soak.scope import FaultScope
from tenure.lab.soak.workload import CANCELLABLE_KINDS
from tenure.ops.demo.fleet import WorkerProcess

log = logging.getLogger("tenure.soak")

PACKET_LOSS_SHARE = 0.3
#: Turns a fault that found nothing to act on is tried again before the rotation moves on.
SKIPPED_TRIES = 3
#: Seconds after a pause's timestamp within which a claim may still have begun before it committed.
PAUSE_COMMIT_MARGIN = 0.5
TRANSFER_TASK = Kind.TRANSFER.value
#: Kinds the JOB_REVOKE fault may cancel outright (see workload.expected).
CANCELLABLE_TASKS = frozenset(k.value for k in CANCELLABLE_KINDS)


class FaultKind(enum.Enum):
    """The faults a soak injects; `tenure soak --faults` names them in lower case (kill, pause, ...)."""

    KILL = "SIGKILL a worker"
    PAUSE = "SIGSTOP/SIGCONT a worker"
    TERMINATE = "pg_terminate_backend of a worker's sessions"
    PARTITION = "network partition worker <-> database"
    RESTART = "PostgreSQL restart"
    PACKET_LOSS = "packet loss worker <-> database"
    SNAPSHOT = "long-held REPEATABLE READ snapshot"
    ROW_LOCKS = "foreign session holding running jobs' row locks"
    READ_ONLY = "database read-only, workers reconnected"
    REVOKE = "worker role's UPDATE on jobs revoked"
    JOB_REVOKE = "an operator revokes running jobs (cancels one, requeues others)"
    QUEUE_PAUSE = "an operator pauses the queue, then resumes it"
    SWITCHOVER = "planned switchover to the synchronous standby"
    PRIMARY_KILL = "SIGKILL of the primary's postmaster"
    UPGRADE = "schema upgraded to the latest version under load"
    PENDING_LOCKS = "foreign session holding pending limited and keyed rows"
    BAD_ROWS = "rows with the worst values the database accepts"
    FORGED_REQUESTS = "DNS-rebinding and cross-site requests to the dashboard"
    ORM_TERMINATE = "pg_terminate_backend of thread handlers' own connections"
    POISON = "a fan-in over its input bound, and a workflow step's row held by a foreign session"


def fault_kinds(names: str | None) -> frozenset[FaultKind] | None:
    """The kinds `--faults` names (comma-separated, lower case); None when it names none."""
    if not names:
        return None
    known = {k.name.lower(): k for k in FaultKind}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise ConfigurationError(
            f"--faults names unknown fault kinds {unknown or [names]}: give some of {', '.join(known)}"
        )
    return frozenset(known[n] for n in wanted)


def spread(others: list[FaultKind], servers: tuple[FaultKind, ...]) -> list[FaultKind]:
    """`others` with `servers` spaced evenly among them: each server fault is followed by other
    faults, so the completions after it are measured before the next server fault begins."""
    if not servers:
        return others
    every = max(1, len(others) // len(servers))
    kinds: list[FaultKind] = []
    for i, server in enumerate(servers):
        kinds += [*others[i * every : (i + 1) * every], server]
    return kinds + others[len(servers) * every :]


#: Faults of the server itself: which of them a run injects depends on its topology.
SERVER_FAULTS = frozenset({FaultKind.RESTART, FaultKind.SWITCHOVER, FaultKind.PRIMARY_KILL})
#: Faults that run once: once done there is nothing left for them to do, and they leave the
#: rotation. The upgrade comes first, while the load is young: the dashboard waits for it, and
#: the worst rows go in through enqueue(), which it brings.
ONE_SHOT = frozenset({FaultKind.UPGRADE})


class ServerFaults(Protocol):
    """What a topology offers the schedule: its server faults, and how to inject one."""

    server_faults: tuple[FaultKind, ...]

    async def inject(self, kind: FaultKind) -> tuple[str, str, bool]: ...


@dataclass(frozen=True)
class FaultRecord:
    at: float
    kind: FaultKind
    target: str
    seconds: float
    detail: str
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at, 2),
            "fault": self.kind.name.lower(),
            "target": self.target,
            "seconds": round(self.seconds, 2),
            "detail": self.detail,
            "skipped": self.skipped,
        }


class FaultSchedule:
    def __init__(
        self,
        *,
        fleet: SoakFleet,
        scope: FaultScope,
        server: ServerFaults,
        network: WorkerNetwork | None,
        network_missing: str,
        started: float,
        acked: dict[str, list[int]] | None = None,
        only: frozenset[FaultKind] | None = None,
    ) -> None:
        """`network`: the namespace worker w1 runs in, or None and why in `network_missing`.
        `acked`: the workload's acknowledged jobs by kind, which the pending-locks fault adds to.
        `only`: the kinds to inject (None: every one); the topology's server faults always run."""
        self.fleet = fleet
        self.scope = scope
        self.server = server
        self.network, self.network_missing = network, network_missing
        self.started = started
        self.queries = SoakQueries(scope.schema)
        self.records: list[FaultRecord] = []
        #: Every kind this run injects, in rotation: the upgrade first, the server's own faults
        #: where RESTART stands.
        self.kinds = [FaultKind.UPGRADE] + [
            k for k in FaultKind if k not in SERVER_FAULTS and k is not FaultKind.UPGRADE
        ]
        at = self.kinds.index(FaultKind.PARTITION) + 1
        self.kinds[at:at] = server.server_faults
        if only is not None:
            self.kinds = spread(
                [k for k in self.kinds if k in only and k not in server.server_faults], server.server_faults
            )
        self.upgrade = SchemaUpgrade(scope)
        if FaultKind.UPGRADE not in self.kinds:
            self.upgrade.current.set()  # the schema starts at the latest version
        self.pending_locks = PendingLocks(scope, acked if acked is not None else {})
        self.bad_rows = BadRows(scope)
        self.forged = ForgedRequests(scope)
        self.poison = PoisonCompletions(scope, self.upgrade.current)
        #: The thread handlers' own connections the ORM_TERMINATE fault killed.
        self.orm_terminated = 0
        #: When each server fault began, wall clock (the database's, on this one host), and how
        #: many seconds it took.
        self.server_faults_at: list[tuple[FaultKind, datetime, float]] = []
        #: Host-clock (stop, cont) intervals per worker name: a frozen process executes nothing.
        self.frozen: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.killed_at: dict[str, float] = {}
        #: Jobs the JOB_REVOKE fault cancelled: they end cancelled, and must have written nothing.
        self.cancelled: list[int] = []
        #: Claims from the queue while the QUEUE_PAUSE fault held it paused: must stay 0.
        self.claims_while_paused = 0
        self._victims = 0

    def counts(self) -> dict[str, int]:
        done: dict[str, int] = {k.name.lower(): 0 for k in self.kinds}
        for r in self.records:
            if not r.skipped:
                done[r.kind.name.lower()] += 1
        return done

    async def run(self, stop: asyncio.Event, gap: float, on_fault: Any) -> None:
        """Injects faults in rotation, `gap` seconds apart, until `stop` is set."""
        kinds = self.kinds
        n = 0
        tries = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=gap)
            if stop.is_set():
                break
            while (kind := kinds[n % len(kinds)]) in ONE_SHOT and self._done(kind):
                n += 1
            started = time.monotonic()
            target, detail, skipped = await self._inject_or_skip(kind)
            # A fault that found nothing to act on (no running job to revoke, no live worker
            # just then) gets its turn again, so one unlucky moment does not leave it unrun.
            tries += 1
            if not skipped or tries >= SKIPPED_TRIES:
                n, tries = n + 1, 0
            record = FaultRecord(
                started - self.started, kind, target, time.monotonic() - started, detail, skipped
            )
            self.records.append(record)
            on_fault(record)

    async def _inject_or_skip(self, kind: FaultKind) -> tuple[str, str, bool]:
        """`_inject`, or, when the database cannot take the fault just now (no writable node
        during a failover: "session is read-only", a refused connection), a skipped turn that
        says why, so the schedule goes on. Any other error stops the schedule, and the soak
        reports it as a failure."""
        try:
            return await self._inject(kind)
        except (TenureError, psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning("fault %s skipped its turn: no writable node (%s)", kind.name.lower(), reason)
            return "database", f"no writable node: {reason[:160]}", True

    def _done(self, kind: FaultKind) -> bool:
        return any(r.kind is kind and not r.skipped for r in self.records)

    def _victim(self) -> WorkerProcess | None:
        live = [w for w in self.fleet.live() if not w.paused]
        if not live:
            return None
        self._victims += 1
        return live[self._victims % len(live)]

    async def _inject(self, kind: FaultKind) -> tuple[str, str, bool]:
        if kind in (FaultKind.KILL, FaultKind.PAUSE, FaultKind.TERMINATE):
            victim = self._victim()
            if victim is None:
                return "-", "no live worker", True
            if kind is FaultKind.KILL:
                return await self._kill(victim)
            if kind is FaultKind.PAUSE:
                return await self._pause(victim)
            return await self._terminate(victim)
        if kind in SERVER_FAULTS:
            began, clock = datetime.now(UTC), time.monotonic()
            try:
                return await self.server.inject(kind)
            finally:
                self.server_faults_at.append((kind, began, time.monotonic() - clock))
        if kind in (FaultKind.PARTITION, FaultKind.PACKET_LOSS):
            return await self._network(kind)
        if kind is FaultKind.ROW_LOCKS:
            return await self._row_locks()
        if kind is FaultKind.READ_ONLY:
            return await self._read_only()
        if kind is FaultKind.REVOKE:
            return await self._revoke()
        if kind is FaultKind.JOB_REVOKE:
            return await self._job_revoke()
        if kind is FaultKind.QUEUE_PAUSE:
            return await self._queue_pause()
        if kind is FaultKind.UPGRADE:
            return await self.upgrade.inject()
        if kind is FaultKind.PENDING_LOCKS:
            return await self.pending_locks.inject()
        if kind is FaultKind.BAD_ROWS:
            return await self.bad_rows.inject()
        if kind is FaultKind.FORGED_REQUESTS:
            return await self.forged.inject()
        if kind is FaultKind.ORM_TERMINATE:
            return await self._orm_terminate()
        if kind is FaultKind.POISON:
            return await self.poison.inject()
        return await self._snapshot()

    async def _kill(self, victim: WorkerProcess) -> tuple[str, str, bool]:
        self.fleet.kill(victim)
        self.killed_at[victim.name] = host_clock()
        await asyncio.sleep(1.0)  # a host takes a moment to come back
        fresh = self.fleet.replace(victim)
        return victim.name, f"crashed; replaced by {fresh.name}", False

    async def _pause(self, victim: WorkerProcess) -> tuple[str, str, bool]:
        seconds = 2.5 * self.scope.lease
        self.fleet.pause(victim)
        stopped = host_clock()
        await asyncio.sleep(seconds)
        self.fleet.resume(victim)
        self.frozen[victim.name].append((stopped, host_clock()))
        return victim.name, f"frozen {seconds:g}s (2.5x the lease)", False

    async def _terminate(self, victim: WorkerProcess) -> tuple[str, str, bool]:
        async with await connect(self.scope.dsn) as conn:
            killed = await self.queries.terminate_worker(conn, victim.owner)
        return victim.name, f"{killed} sessions terminated", False

    async def _orm_terminate(self) -> tuple[str, str, bool]:
        async with await connect(self.scope.dsn) as conn:
            killed = await self.queries.terminate_orm(conn, self.scope.worker_prefix, ORM_SUFFIX)
        if not killed:
            return "sessions", "no thread handler held a connection of its own", True
        self.orm_terminated += killed
        return "sessions", f"{killed} of the thread handlers' own connections terminated", False

    async def checks(self, conn: Any) -> list[Check]:
        """The verdicts of the faults that judge what they did themselves."""
        kinds = set(self.kinds)
        return [
            *(await self.upgrade.checks(conn) if FaultKind.UPGRADE in kinds else []),
            *(self.pending_locks.checks() if FaultKind.PENDING_LOCKS in kinds else []),
            *(await self.bad_rows.checks(conn) if FaultKind.BAD_ROWS in kinds else []),
            *(self.forged.checks() if FaultKind.FORGED_REQUESTS in kinds else []),
            *(await self.poison.checks(conn) if FaultKind.POISON in kinds else []),
        ]

    async def _network(self, kind: FaultKind) -> tuple[str, str, bool]:
        victim = self.fleet.current("w1")
        if self.network is None or victim is None:
            return "w1", self.network_missing or "no worker in the namespace", True
        if kind is FaultKind.PARTITION:
            seconds = 2.0 * self.scope.lease
            self.network.partition()
            detail = f"every packet dropped for {seconds:g}s (2x the lease)"
        else:
            seconds = 3.0 * self.scope.lease
            self.network.lose_packets(PACKET_LOSS_SHARE)
            detail = f"{PACKET_LOSS_SHARE:.0%} of packets dropped for {seconds:g}s"
        try:
            await asyncio.sleep(seconds)
        finally:
            self.network.heal()
        return victim.name, detail, False

    async def _snapshot(self) -> tuple[str, str, bool]:
        seconds = 4.0 * self.scope.lease
        async with await connect(self.scope.dsn, autocommit=False) as conn:
            await conn.set_isolation_level(IsolationLevel.REPEATABLE_READ)
            held = await self.queries.snapshot_open(conn)
            await asyncio.sleep(seconds)
            await conn.rollback()
        return "session", f"snapshot (xid {held['xid']}, {held['jobs']} jobs) held {seconds:g}s", False

    async def _row_locks(self) -> tuple[str, str, bool]:
        seconds = 2.0 * self.scope.lease
        async with await connect(self.scope.dsn, autocommit=False) as conn:
            locked = await self.queries.lock_running_jobs(conn, limit=5)
            await asyncio.sleep(seconds)
            await conn.rollback()
        return "session", f"row locks of {len(locked)} running jobs held {seconds:g}s", False

    async def _read_only(self) -> tuple[str, str, bool]:
        database, prefix = self.scope.database, self.scope.worker_prefix
        if database is None:
            return "database", "no database name", True
        seconds = 2.0 * self.scope.lease
        # One session does both switches: a session opened while the database is read-only
        # could not write either.
        async with await connect(self.scope.dsn) as conn:
            await set_read_only(conn, database, True)
            ended = await self.queries.terminate_workers(conn, prefix)
            try:
                await asyncio.sleep(seconds)
            finally:
                await set_read_only(conn, database, False)
                await self.queries.terminate_workers(conn, prefix)
        return "database", f"read-only for {seconds:g}s ({ended} worker sessions moved to it)", False

    async def _revoke(self) -> tuple[str, str, bool]:
        role = self.scope.role
        if role is None:
            return "role", "workers do not run as the soak's own role", True
        seconds = 2.0 * self.scope.lease
        async with await connect(self.scope.dsn) as conn:
            await role.revoke_update(conn)
            try:
                await asyncio.sleep(seconds)
            finally:
                await role.grant(conn)
        return role.name, f"UPDATE on jobs revoked for {seconds:g}s, then granted again", False

    async def _job_revoke(self) -> tuple[str, str, bool]:
        """Revokes up to three running jobs through the library: one is cancelled (its holder
        may commit nothing), the others go back to pending under a new token."""
        async with await connect(self.scope.dsn) as conn:
            running = await self.queries.running_sample(conn, limit=10)
        if not running:
            return "jobs", "no running job to revoke", True
        # A transfer if one runs (its ledger proves a revoked holder commits nothing), else a
        # slow job; kinds with checks of their own (ordering, effects, snoozes) are requeued.
        cancellable = sorted(
            (r for r in running if r["task"] in CANCELLABLE_TASKS), key=lambda r: r["task"] != TRANSFER_TASK
        )
        transfer = cancellable[0]["id"] if cancellable else None
        requeue = [r["id"] for r in running if r["id"] != transfer][:2]
        done: list[str] = []
        async with Client(self.scope.dsn, schema=self.scope.schema) as client:
            if transfer is not None and self.scope.operator is not None:
                # The outright cancel goes through the dashboard, as an operator at the browser would.
                answer = await self.scope.operator.act(
                    f"/jobs/{transfer}/cancel", reason="soak: revoke at the dashboard"
                )
                job = await client.get_job(transfer)
                # Counted by what the database says: an answer lost to a dropped connection may
                # still have committed, and nothing else cancels a job.
                if job is not None and job.state is JobState.CANCELLED:
                    self.cancelled.append(transfer)
                done.append(f"dashboard cancel {act_outcome(answer)}")
                transfer = None
            for ids, back in (([transfer] if transfer else [], False), (requeue, True)):
                if not ids:
                    continue
                try:
                    report = await client.cancel(
                        ids, reason="soak: operator revoke", requeue=back, actor="soak"
                    )
                except ControlRefused as refused:  # finished since it was sampled: nothing changed
                    done.append(f"refused ({refused})"[:120])
                    continue
                if not back:
                    self.cancelled += report.revoked
                done.append(f"{'requeued' if back else 'cancelled'} {report.revoked}")
        return "jobs", "; ".join(done), False

    async def _queue_pause(self) -> tuple[str, str, bool]:
        """Pauses the soak's queue for two leases, checks no worker claimed from it meanwhile,
        and resumes it."""
        seconds = 2.0 * self.scope.lease
        async with Client(self.scope.dsn, schema=self.scope.schema) as client:
            paused_at, how = await self._pause_soak_queue(client)
            try:
                await asyncio.sleep(seconds)
                async with await connect(self.scope.dsn) as conn:
                    # A claim that began before the pause committed may still land just after
                    # paused_at; the margin leaves those out.
                    claims = await self.queries.claims_since(
                        conn, SOAK_QUEUE, paused_at + timedelta(seconds=PAUSE_COMMIT_MARGIN)
                    )
            finally:
                how += await self._resume_soak_queue(client)
        self.claims_while_paused += claims
        return SOAK_QUEUE, f"paused {seconds:g}s{how}; {claims} claims while paused", False

    async def _pause_soak_queue(self, client: Client) -> tuple[datetime, str]:
        """Through the dashboard when there is one (falling back to the library if its answer is
        not a pause): the pause's time, and how it was made."""
        how = ""
        if self.scope.operator is not None:
            answer = await self.scope.operator.act(
                f"/queues/{SOAK_QUEUE}/pause", reason="soak: pause at the dashboard"
            )
            if answer == 303:
                [pause] = [p for p in await client.paused_queues() if p.queue == SOAK_QUEUE]
                return pause.paused_at, " at the dashboard"
            how = f" (dashboard {act_outcome(answer)}, then the library)"
        pause = await client.pause_queue(SOAK_QUEUE, reason="soak: operator pause", actor="soak")
        return pause.paused_at, how

    async def _resume_soak_queue(self, client: Client) -> str:
        if self.scope.operator is not None:
            answer = await self.scope.operator.act(
                f"/queues/{SOAK_QUEUE}/resume", reason="soak: resume at the dashboard"
            )
            if answer == 303:
                return ""
            with contextlib.suppress(ControlRefused):
                await client.resume_queue(SOAK_QUEUE, actor="soak")
            return f", resume at the dashboard {act_outcome(answer)}"
        await client.resume_queue(SOAK_QUEUE, actor="soak")
        return ""
