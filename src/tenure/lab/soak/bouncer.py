"""A real PgBouncer in transaction mode in front of one PostgreSQL, for the soak's `pgbouncer`
topology and the scale-out tests: the Debian package's binary, started on a free port, stopped
at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg import conninfo

from tenure import ConfigurationError, DatabaseUnavailable

STARTUP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Bouncer:
    """A PgBouncer process this run started."""

    host: str
    port: int
    user: str
    pool_size: int
    log_path: Path

    def route(self, dsn: str, host: str | None = None) -> str:
        """`dsn`'s database and user, through PgBouncer (reached at `host`, by default the
        address it was started on)."""
        params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
        params.update(host=host or self.host, port=str(self.port))
        return conninfo.make_conninfo(**params)

    def accepting(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.5):
            return True
        return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        raise ConfigurationError("pgbouncer is not installed: run scripts/install-system-deps.sh")
    return found


def _config(server: dict[str, Any], listen: str, port: int, workdir: Path, pool_size: int, admin: str) -> str:
    return (
        "[databases]\n"
        f"* = host={server.get('host') or '127.0.0.1'} port={server.get('port') or 5432}\n"
        "\n"
        "[pgbouncer]\n"
        f"listen_addr = {listen}\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {workdir / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\n"
        "max_client_conn = 500\n"
        # Its default, 15 s, would keep every worker waiting that long after a restart.
        "server_login_retry = 1\n"
        f"admin_users = {admin}\n"
    )


@contextlib.contextmanager
def launch_pgbouncer(
    server_dsn: str,
    workdir: Path,
    *,
    pool_size: int,
    listen_addr: str = "127.0.0.1",
    extra_users: Sequence[str] = (),
) -> Iterator[Bouncer]:
    """A real PgBouncer in transaction mode on a free port of `listen_addr` (a comma-separated
    list of addresses, or '*': every address of this host), in front of the server of
    `server_dsn` (every database name maps to it), trusting its user and `extra_users`."""
    server: dict[str, Any] = conninfo.conninfo_to_dict(server_dsn)
    user = str(server.get("user") or "postgres")
    port = _free_port()
    # Trust still needs each user named in the auth file.
    (workdir / "userlist.txt").write_text("".join(f'"{u}" ""\n' for u in (user, *extra_users)))
    (workdir / "pgbouncer.ini").write_text(_config(server, listen_addr, port, workdir, pool_size, user))
    log_path = workdir / "pgbouncer.log"
    command = [pgbouncer_binary(), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root; it reads its files, then switches
        command[1:1] = ["-u", "nobody"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    first = "127.0.0.1" if listen_addr == "*" else listen_addr.split(",")[0].strip()
    bouncer = Bouncer(host=first, port=port, user=user, pool_size=pool_size, log_path=log_path)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not bouncer.accepting():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DatabaseUnavailable(f"pgbouncer did not start:\n{bouncer.log()[-2000:]}")
            time.sleep(0.05)
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
