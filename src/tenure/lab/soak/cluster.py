"""A local pg_auto_failover cluster: a monitor, a primary and its standbys, all on this host, run
by real `pg_autoctl` processes as the `postgres` OS user (PostgreSQL refuses to run as root) in a
temporary directory, torn down at the end. The soak's `failover` topology and the failover tests
run on it.

What a topology keeps is pg_auto_failover's. Two nodes (`number_sync_standbys = 0`): the standby
is synchronous while healthy, but whenever the primary is in `wait_primary` (after every failover
until the old primary rejoins, and while the standby is judged unhealthy) it runs with
`synchronous_standby_names = ''`, and a standby counts as `secondary` within 16 MB of the primary:
commits acknowledged in that window can be lost by a second failure. Three nodes with
`number_sync_standbys = 1`: every commit waits for one of two standbys even while the other is
gone, so back-to-back failures keep every acknowledged commit, at the price of writes blocking
when no standby is there.

pg_auto_failover decides everything here: who is primary, when the standby is synchronous, when
to promote. Tenure only starts it, asks it for a switchover, and kills the primary's postmaster.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from tenure import ConfigurationError, DatabaseUnavailable
from tenure.db.sqlfiles import package_queries


def _queries() -> dict[str, str]:
    return package_queries("tenure.lab.soak")


def _rows(conn: psycopg.Connection[Any], name: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(_queries()[name])
        return cur.fetchall() if cur.description else []


PG_BIN = Path("/usr/lib/postgresql/15/bin")
OS_USER = "postgres"
#: The monitor's health checks, tightened from their defaults (5 s period, 20 s before a node is
#: unhealthy, 30 s demote timeout) so that a killed primary is replaced in seconds, not a minute.
#: The demote timeout is then below the keeper's network_partition_timeout (20 s): a primary cut
#: off from the monitor, but alive, may still be primary when its standby is promoted. No promise
#: asserted here meets that case: the kill below stops the old primary's keeper and its postmaster
#: together, so it acknowledges nothing after it; and with number_sync_standbys = 1 (the soak's
#: three nodes) a primary acknowledges nothing its standbys, following the new primary, have not
#: confirmed. A two-node cluster whose primary sits alive in wait_primary is the case it leaves out.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1s",
    "pgautofailover.health_check_retry_delay": "500ms",
    "pgautofailover.health_check_timeout": "1s",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.node_considered_unhealthy_timeout": "3s",
    "pgautofailover.primary_demote_timeout": "3s",
}
#: Small nodes: this machine runs two or three of them beside the monitor and the test's workers.
NODE_SETTINGS = {"shared_buffers": "32MB", "max_connections": "100", "wal_keep_size": "64MB"}


def _alter_system(conn: psycopg.Connection[Any], settings: dict[str, str]) -> None:
    for name, value in settings.items():
        statement = sql.SQL(_queries()["cluster_alter_system"]).format(
            name=sql.Identifier(*name.split(".")), value=sql.Literal(value)
        )
        conn.execute(statement)


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (bound and released together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def check_installed() -> None:
    if os.geteuid() != 0:
        raise ConfigurationError(
            f"the failover cluster runs pg_autoctl as the {OS_USER!r} OS user, which takes root: "
            "run them as root"
        )
    if shutil.which("pg_autoctl") is None or not (PG_BIN / "postgres").exists():
        raise ConfigurationError(
            "pg_autoctl (Debian package postgresql-15-auto-failover) is not installed: "
            "run scripts/install-system-deps.sh"
        )


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    proc: subprocess.Popen[bytes] | None = None
    frozen: list[int] = field(default_factory=list)


class FailoverCluster:
    """Monitor + nodes. `dsn` is the multi-host DSN workers use; `primary()` asks the monitor."""

    def __init__(
        self, extra_hosts: Sequence[str] = (), *, nodes: int = 2, number_sync_standbys: int = 0
    ) -> None:
        """`extra_hosts`: addresses beside 127.0.0.1 the nodes listen on (the host end of a worker
        namespace's veth pair), each trusted for its /24. `nodes`: the primary and its standbys;
        `number_sync_standbys`: the formation's, which pg_auto_failover accepts only below the
        number of standbys."""
        check_installed()
        standbys = nodes - 1
        if (
            standbys < 1
            or number_sync_standbys < 0
            or (number_sync_standbys and number_sync_standbys >= standbys)
        ):
            raise ConfigurationError(
                f"a cluster of {nodes} nodes cannot keep number_sync_standbys {number_sync_standbys}: "
                "give at least two nodes, and more standbys than synchronous ones"
            )
        self.extra_hosts = list(extra_hosts)
        self.number_sync_standbys = number_sync_standbys
        self.root = Path(tempfile.mkdtemp(prefix="tenure-failover-"))
        account = pwd.getpwnam(OS_USER)
        os.chown(self.root, account.pw_uid, account.pw_gid)
        monitor_port, *ports = free_ports(1 + nodes)
        self.monitor = Node("monitor", monitor_port, self.root / "monitor")
        self.nodes = [Node(f"node_{n}", port, self.root / f"node_{n}") for n, port in enumerate(ports, 1)]
        self.setup_seconds = 0.0

    # -- addresses ---------------------------------------------------------------------------

    def node_dsn(self, node: Node, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={node.port} user=postgres dbname={dbname}"

    def dsn(self, dbname: str = "postgres") -> str:
        """Every node; libpq takes the first that accepts writes (the primary, whichever it is)."""
        ports = ",".join(str(n.port) for n in self.nodes)
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        return (
            f"host={hosts} port={ports} user=postgres dbname={dbname} "
            "target_session_attrs=read-write connect_timeout=2"
        )

    @property
    def monitor_uri(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    # -- running pg_autoctl ------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # Its configuration and pid files go under our directory, not the postgres user's home.
        return {
            "PATH": f"{PG_BIN}:/usr/bin:/bin",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "data"),
            "XDG_RUNTIME_DIR": str(self.root / "run"),
            "LANG": "C.UTF-8",
        }

    def _spawn(self, node: Node, *args: str) -> None:
        log = (self.root / f"{node.name}.log").open("ab")
        node.proc = subprocess.Popen(
            ["pg_autoctl", *args, "--run"],
            user=OS_USER,
            env=self._env(),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def autoctl(self, *args: str, timeout: float = 90.0) -> str:
        done = subprocess.run(
            ["pg_autoctl", *args],
            user=OS_USER,
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise DatabaseUnavailable(
                f"pg_autoctl {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- the monitor's view ------------------------------------------------------------------

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported, assigned) state, as the monitor has them."""
        with psycopg.connect(self.node_dsn(self.monitor, "pg_auto_failover"), autocommit=True) as conn:
            return {r["name"]: (r["reported"], r["goal"]) for r in _rows(conn, "cluster_node_states")}

    def wait_for_states(self, wanted: dict[str, str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                last = self.states()
                if all(last.get(name) == (state, state) for name, state in wanted.items()):
                    return
            time.sleep(0.2)
        raise DatabaseUnavailable(
            f"cluster did not reach {wanted} in {timeout}s: {last}\n{self._log_tails()}"
        )

    def wait_healthy(self, timeout: float) -> None:
        """Until one node is primary and every other a secondary (a synchronous standby again)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        healthy = sorted([("primary", "primary")] + [("secondary", "secondary")] * (len(self.nodes) - 1))
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                last = self.states()
                if sorted(last.values()) == healthy:
                    return
            time.sleep(0.2)
        raise DatabaseUnavailable(f"cluster not healthy in {timeout}s: {last}\n{self._log_tails()}")

    def synchronous_settings(self) -> dict[str, str]:
        """The primary's synchronous_standby_names and synchronous_commit."""
        with psycopg.connect(self.node_dsn(self.primary()), autocommit=True) as conn:
            return dict(_rows(conn, "cluster_synchronous_settings")[0])

    def primary(self) -> Node:
        """The node the monitor has as primary: its reported and assigned states both a primary's,
        else one of them. A demoted primary whose keeper was frozen goes on reporting `primary`
        until it next reports, after its successor's promotion: the first node found reporting
        `primary` was that one for a moment."""
        states = self.states()
        roles = ("primary", "wait_primary", "single")
        nodes = [(node, *states.get(node.name, ("", ""))) for node in self.nodes]
        for node, reported, goal in nodes:
            if reported in roles and goal in roles:
                return node
        for node, reported, goal in nodes:
            if goal in roles or reported in roles:
                return node
        raise DatabaseUnavailable(f"no primary: {states}")

    def standby(self) -> Node:
        primary = self.primary()
        return next(n for n in self.nodes if n is not primary)

    def wait_for_promotion(self, old: Node, timeout: float) -> Node:
        """Until the monitor has made a node other than `old` the primary (reported and assigned,
        `wait_primary` or `primary`): that node."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                last = self.states()
                for node in self.nodes:
                    reported, goal = last.get(node.name, ("", ""))
                    if node is not old and reported == goal and reported in ("wait_primary", "primary"):
                        return node
            time.sleep(0.2)
        raise DatabaseUnavailable(f"no standby promoted in {timeout}s: {last}\n{self._log_tails()}")

    # -- building and tearing down -----------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        common = ("--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
        self._spawn(self.monitor, "create", "monitor", "--pgdata", str(self.monitor.pgdata),
                    "--pgport", str(self.monitor.port), *common)  # fmt: skip
        self._wait_accepting(self.monitor, "pg_auto_failover", timeout=60)
        with psycopg.connect(self.node_dsn(self.monitor, "pg_auto_failover"), autocommit=True) as conn:
            _alter_system(conn, MONITOR_SETTINGS)
            _rows(conn, "cluster_reload_conf")
        first, *standbys = self.nodes
        self._create_node(first, common)
        self.wait_for_states({first.name: "single"}, timeout=60)
        # Set on the primary before the standbys are cloned from it, so all start small.
        with psycopg.connect(self.node_dsn(first), autocommit=True) as conn:
            _alter_system(conn, NODE_SETTINGS)
        self._trust_extra_hosts(first)
        for standby in standbys:
            self._create_node(standby, common)
            self.wait_for_states({first.name: "primary", standby.name: "secondary"}, timeout=90)
            self._trust_extra_hosts(standby)
        if self.number_sync_standbys:
            # Options before the value: pg_autoctl reads no option after it.
            self.autoctl("set", "formation", "number-sync-standbys", "--pgdata", str(first.pgdata),
                         str(self.number_sync_standbys))  # fmt: skip
            self.wait_healthy(timeout=60)
        self.setup_seconds = time.monotonic() - started

    def _create_node(self, node: Node, common: tuple[str, ...]) -> None:
        listen = ",".join(["127.0.0.1", *self.extra_hosts])
        self._spawn(node, "create", "postgres", "--pgdata", str(node.pgdata), "--pgport", str(node.port),
                    "--name", node.name, "--monitor", self.monitor_uri, "--pg-hba-lan",
                    "--listen", listen, *common)  # fmt: skip

    def _trust_extra_hosts(self, node: Node) -> None:
        """pg_autoctl trusts 127.0.0.1's network; the worker namespaces' networks are added here
        (a standby cloned afterwards copies the lines; adding them twice does no harm)."""
        if not self.extra_hosts:
            return
        with (node.pgdata / "pg_hba.conf").open("a", encoding="utf-8") as hba:
            for host in self.extra_hosts:
                hba.write(f"host all all {host.rsplit('.', 1)[0]}.0/24 trust\n")
        with psycopg.connect(self.node_dsn(node), autocommit=True) as conn:
            _rows(conn, "cluster_reload_conf")

    def _wait_accepting(self, node: Node, dbname: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.node_dsn(node, dbname), connect_timeout=1) as conn:
                    _rows(conn, "cluster_clock")
                    return
            except psycopg.Error:
                time.sleep(0.2)
        raise DatabaseUnavailable(
            f"{node.name} did not accept connections in {timeout}s\n{self._log_tails()}"
        )

    def _log_tails(self) -> str:
        names = ["monitor", *(n.name for n in self.nodes)]
        return "\n".join(f"--- {n}.log\n{self.log(n)[-1500:]}" for n in names)

    def events(self, count: int = 10_000) -> str:
        """The monitor's event log (`pg_autoctl show events`): every state change and why."""
        return self.autoctl("show", "events", "--pgdata", str(self.monitor.pgdata), "--count", str(count))

    def keep_evidence(self, into: Path) -> list[Path]:
        """Copies the monitor's event log and every pg_autoctl log (monitor and nodes, with their
        PostgreSQL's output) into `into`, which outlives the cluster: the files written."""
        into.mkdir(parents=True, exist_ok=True)
        written = []
        try:
            text = self.events()
        except (DatabaseUnavailable, OSError, subprocess.TimeoutExpired) as exc:
            text = f"pg_autoctl show events failed: {exc}\n"
        events = into / "events.txt"
        events.write_text(text, encoding="utf-8")
        written.append(events)
        for name in ["monitor", *(n.name for n in self.nodes)]:
            source = self.root / f"{name}.log"
            if source.exists():
                shutil.copyfile(source, into / f"{name}.log")
                written.append(into / f"{name}.log")
        return written

    def stop(self) -> None:
        for node in [*self.nodes, self.monitor]:
            self.thaw(node)
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)  # pg_autoctl stops its postgres, then exits
        for node in [*self.nodes, self.monitor]:
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.proc.pid, signal.SIGKILL)
                node.proc.wait(timeout=10)
            self._kill_leftover_postmaster(node)
        shutil.rmtree(self.root, ignore_errors=True)

    @staticmethod
    def _kill_leftover_postmaster(node: Node) -> None:
        pid_file = node.pgdata / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().split()[0])
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(str(PG_BIN / "postgres").encode()):
                os.kill(pid, signal.SIGKILL)

    # -- the failovers -----------------------------------------------------------------------

    def switchover(self) -> None:
        """A planned switchover: the monitor demotes the primary and promotes the standby."""
        self.autoctl("perform", "switchover", "--pgdata", str(self.monitor.pgdata), "--wait", "60")

    def postmaster_pid(self, node: Node) -> int:
        return int((node.pgdata / "postmaster.pid").read_text().split()[0])

    def freeze_keeper(self, node: Node) -> None:
        """SIGSTOP the node's pg_autoctl processes (not its postgres), so it cannot restart a
        killed postmaster before the monitor has promoted the standby."""
        assert node.proc is not None
        top = node.proc.pid
        children = Path(f"/proc/{top}/task/{top}/children").read_text().split()
        pids = [top, *(int(c) for c in children)]
        pids = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip().startswith("pg_autoctl")]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        node.frozen = pids

    def thaw(self, node: Node) -> None:
        for pid in node.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        node.frozen = []

    def kill_primary(self) -> Node:
        """An unplanned failover: the primary's postmaster dies by SIGKILL. Returns the old primary."""
        node = self.primary()
        self.freeze_keeper(node)
        os.kill(self.postmaster_pid(node), signal.SIGKILL)
        return node
