"""Where the soak's database runs and how its workers reach it.

- `direct`: the soak's own PostgreSQL (or the one `--dsn` names), workers connect to it;
- `pgbouncer`: the soak's own PostgreSQL behind a real PgBouncer in transaction mode; workers
  and the producer go through PgBouncer, each worker LISTENs on a direct connection;
- `failover`: a pg_auto_failover primary with two standbys and `number_sync_standbys = 1`, the
  topology that keeps every acknowledged commit through back-to-back failures (with two nodes a
  primary in `wait_primary` acknowledges commits alone: tenure.lab.soak.cluster); everyone
  connects with the multi-host DSN (`target_session_attrs=read-write`), and the server faults are
  a planned switchover and a SIGKILL of the primary's postmaster.

Each topology names the server faults it can inject: the rest of the fault schedule is the same
for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

from psycopg import conninfo

from tenure.db.connect import DSN_ENV, LISTEN_DSN_ENV, PREPARE_THRESHOLD_ENV, describe_dsn
from tenure.lab.soak.bouncer import Bouncer, launch_pgbouncer
from tenure.lab.soak.cluster import FailoverCluster
from tenure.lab.soak.faults import FaultKind
from tenure.lab.soak.server import SoakServer

TOPOLOGIES = ("direct", "pgbouncer", "failover")
#: PgBouncer's server connections per database and user: fewer than the soak's workers hold
#: client connections, so they share.
BOUNCER_POOL_SIZE = 12
NO_PREPARED_STATEMENTS = "none"
#: Seconds the cluster has to be a primary and synchronous standbys again before the next
#: switchover or kill (the killed primary rejoins with pg_rewind).
HEALTHY_TIMEOUT = 90.0
#: The failover topology: a primary and two standbys, one of which confirms every commit.
FAILOVER_NODES = 3
FAILOVER_SYNC_STANDBYS = 1


def _with_host(dsn: str, host: str | None) -> str:
    """`dsn` reached at `host` instead (every host of a multi-host DSN)."""
    if host is None:
        return dsn
    params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    hosts = str(params.get("host") or "127.0.0.1").split(",")
    params["host"] = ",".join(host for _ in hosts)
    return conninfo.make_conninfo(**params)


class Topology:
    """The soak's own PostgreSQL, restartable; workers connect to it directly."""

    name = "direct"
    server_faults: tuple[FaultKind, ...] = (FaultKind.RESTART,)

    def __init__(self, extra_hosts: list[str], run_dir: Path, worker_role: str) -> None:
        self.extra_hosts = extra_hosts
        self.run_dir = run_dir
        self.worker_role = worker_role
        self._server: SoakServer | None = None
        self.restarts = 0

    @property
    def server(self) -> SoakServer:
        """The soak's own server, made on first use: a topology with servers of its own (or
        someone else's) never makes one, nor its data directory."""
        if self._server is None:
            self._server = SoakServer(extra_hosts=self.extra_hosts)
        return self._server

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def maintenance_dsn(self) -> str:
        return self.server.dsn()

    def cluster_states(self) -> dict[str, tuple[str, str]] | None:
        """Each node's (reported, assigned) state, where an HA monitor has them; None: no monitor."""
        return None

    def keep_evidence(self, into: Path) -> list[Path]:
        """Copies what the servers logged into `into`, before they are torn down: the files."""
        return []

    def describe(self) -> str:
        return f"its own PostgreSQL (data in {self.server.data_dir})"

    def worker_environment(self, dsn: str, host: str | None) -> dict[str, str]:
        """The DSN variables of a worker reaching the database at `host` (None: as the soak does)."""
        return {DSN_ENV: _with_host(dsn, host)}

    def producer_dsn(self, dsn: str) -> str:
        return dsn

    async def inject(self, kind: FaultKind) -> tuple[str, str, bool]:
        await asyncio.to_thread(self.server.restart)
        self.restarts += 1
        return "server", f"fast shutdown and start (restart #{self.restarts})", False


class GivenServer(Topology):
    """The server `--dsn` names: never restarted, so the soak's RESTART fault cannot run."""

    def __init__(self, dsn: str, extra_hosts: list[str], run_dir: Path, worker_role: str) -> None:
        super().__init__(extra_hosts, run_dir, worker_role)
        self.dsn = dsn

    def start(self) -> None:
        """Nothing to start: the server runs already."""

    def stop(self) -> None:
        """Nothing to stop: the server is someone else's."""

    def maintenance_dsn(self) -> str:
        return self.dsn

    def describe(self) -> str:
        return describe_dsn(self.dsn)

    async def inject(self, kind: FaultKind) -> tuple[str, str, bool]:
        return "server", "not the soak's own server", True


class BehindPgBouncer(Topology):
    """The soak's own PostgreSQL behind PgBouncer (transaction mode)."""

    name = "pgbouncer"

    def __init__(self, extra_hosts: list[str], run_dir: Path, worker_role: str) -> None:
        super().__init__(extra_hosts, run_dir, worker_role)
        self._stack = contextlib.ExitStack()
        self.bouncer: Bouncer | None = None

    def start(self) -> None:
        # Debian's PgBouncer (1.18) keeps no prepared statements in transaction mode; the
        # producer, in this process, goes through it too.
        os.environ[PREPARE_THRESHOLD_ENV] = NO_PREPARED_STATEMENTS
        super().start()
        workdir = self.run_dir / "pgbouncer"
        workdir.mkdir(exist_ok=True)
        self.bouncer = self._stack.enter_context(
            launch_pgbouncer(
                self.server.dsn(),
                workdir,
                pool_size=BOUNCER_POOL_SIZE,
                listen_addr=",".join(["127.0.0.1", *self.extra_hosts]),
                extra_users=[self.worker_role],
            )
        )

    def stop(self) -> None:
        self._stack.close()
        super().stop()

    def describe(self) -> str:
        assert self.bouncer is not None
        return (
            f"its own PostgreSQL (data in {self.server.data_dir}) behind PgBouncer "
            f"(transaction mode, port {self.bouncer.port}, {BOUNCER_POOL_SIZE} server connections)"
        )

    def worker_environment(self, dsn: str, host: str | None) -> dict[str, str]:
        assert self.bouncer is not None
        # LISTEN needs a session of its own, which transaction pooling cannot keep. No
        # prepared-statement setting: the workers find by themselves that this PgBouncer keeps
        # none between transactions, and prepare none.
        return {DSN_ENV: self.bouncer.route(dsn, host), LISTEN_DSN_ENV: _with_host(dsn, host)}

    def producer_dsn(self, dsn: str) -> str:
        assert self.bouncer is not None
        return self.bouncer.route(dsn)

    async def inject(self, kind: FaultKind) -> tuple[str, str, bool]:
        target, detail, skipped = await super().inject(kind)
        return target, f"{detail}, PgBouncer left running", skipped


class Failover(Topology):
    """A pg_auto_failover primary and two standbys, one of them confirming every commit
    (number_sync_standbys = 1); everyone on the multi-host DSN."""

    name = "failover"
    server_faults = (FaultKind.SWITCHOVER, FaultKind.PRIMARY_KILL)

    def __init__(self, extra_hosts: list[str], run_dir: Path, worker_role: str) -> None:
        super().__init__(extra_hosts, run_dir, worker_role)
        self.cluster = FailoverCluster(
            extra_hosts=extra_hosts, nodes=FAILOVER_NODES, number_sync_standbys=FAILOVER_SYNC_STANDBYS
        )

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        self.cluster.stop()

    def maintenance_dsn(self) -> str:
        return self.cluster.dsn("postgres")

    def cluster_states(self) -> dict[str, tuple[str, str]] | None:
        return self.cluster.states()

    def keep_evidence(self, into: Path) -> list[Path]:
        return self.cluster.keep_evidence(into)

    def describe(self) -> str:
        settings = self.cluster.synchronous_settings()
        return (
            f"a pg_auto_failover primary and {FAILOVER_NODES - 1} standbys, number_sync_standbys "
            f"{FAILOVER_SYNC_STANDBYS} (PostgreSQL 15, synchronous_standby_names {settings['names']!s}), "
            f"up in {self.cluster.setup_seconds:.0f}s"
        )

    async def inject(self, kind: FaultKind) -> tuple[str, str, bool]:
        # Each failover starts from a healthy pair, or it would test nothing but an outage.
        await asyncio.to_thread(self.cluster.wait_healthy, HEALTHY_TIMEOUT)
        before = self.cluster.primary()
        if kind is FaultKind.SWITCHOVER:
            await asyncio.to_thread(self.cluster.switchover)
            after = self.cluster.primary()
            return before.name, f"switchover: {after.name} is primary now", False
        old = await asyncio.to_thread(self.cluster.kill_primary)
        try:
            promoted = await asyncio.to_thread(self.cluster.wait_for_promotion, old, 60.0)
        finally:
            self.cluster.thaw(old)  # its keeper rejoins it as a standby (pg_rewind), in the background
        return old.name, f"postmaster SIGKILLed; {promoted.name} promoted", False


def make_topology(
    name: str, dsn: str | None, extra_hosts: list[str], run_dir: Path, worker_role: str
) -> Topology:
    """`worker_role`: the LOGIN role the workers will connect as (PgBouncer must know it)."""
    if dsn is not None:
        return GivenServer(dsn, extra_hosts, run_dir, worker_role)
    kinds: dict[str, type[Topology]] = {"pgbouncer": BehindPgBouncer, "failover": Failover}
    return kinds.get(name, Topology)(extra_hosts, run_dir, worker_role)
