"""Worker processes of any contender: started as real OS processes, stopped with SIGTERM, their
CPU time and peak memory read from the kernel just before they are stopped.

Each process gets a name of its own ($TENURE_BENCH_PROCESS_NAME), which it puts on its database
sessions as `application_name` (`process_dsn`): that is how the start gate sees, from the
server, which processes have their first claim waiting (gate.py).

The peak is VmHWM of /proc/<pid>/status, the high-water mark of the process's own address space.
Not ru_maxrss from wait4: Linux carries the forking parent's high-water mark over exec into it,
so every child would report at least the benchmark's own size."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from psycopg import conninfo

from tenure.lab.bench.cpu import cpu_seconds

PROCESS_NAME_ENV = "TENURE_BENCH_PROCESS_NAME"
#: Every group started in this run gets its own number, so that the names of a group's sessions
#: never match those of a group before it whose sessions are still closing.
_group_numbers = itertools.count(1)


def process_dsn(dsn: str) -> str:
    """`dsn` with this process's name as its application_name (unchanged outside a group)."""
    name = os.environ.get(PROCESS_NAME_ENV)
    return conninfo.make_conninfo(dsn, application_name=name) if name else dsn


@dataclass
class ProcessGroup:
    argv: list[str]
    count: int
    env: dict[str, str] = field(default_factory=dict)
    label: str = "worker"
    #: A fragment of the contender's claim statement: a process is ready once a statement holding
    #: it waits at the gate (gate.py). None: any statement of the process counts.
    claim_marker: str | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    spawned_at: list[float] = field(default_factory=list)
    peak_rss_kib: list[int] = field(default_factory=list)
    #: CPU seconds (user + system) each process had used when stop() was called.
    cpu_seconds_at_stop: list[float] = field(default_factory=list)

    def start(self) -> None:
        number = next(_group_numbers)
        for i in range(self.count):
            name = f"tb{os.getpid()}-{number}-{self.label}-{i}"
            env = {**os.environ, **self.env, PROCESS_NAME_ENV: name}
            self.spawned_at.append(time.monotonic())
            self.procs.append(subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL))
            self.names.append(name)

    @property
    def name_prefix(self) -> str:
        """What every session name of this group (and of no other group) starts with."""
        return self.names[0].rsplit("-", 1)[0] + "-" if self.names else ""

    def exited(self) -> list[tuple[str, int]]:
        """(name, exit code) of the processes that have already exited."""
        pairs = zip(self.names, self.procs, strict=True)
        return [(name, proc.returncode) for name, proc in pairs if proc.poll() is not None]

    def cpu_seconds(self) -> list[float]:
        """CPU seconds each live process has used so far (0 for one already gone)."""
        return [cpu_seconds(p.pid) or 0.0 for p in self.procs]

    async def stop(self, timeout: float = 20.0) -> None:
        if not self.procs:
            return  # stopped already: keep what was read then
        self.peak_rss_kib.extend(filter(None, (_high_water_kib(p.pid) for p in self.procs)))
        self.cpu_seconds_at_stop = self.cpu_seconds()
        for proc in self.procs:
            if proc.poll() is None:  # one reaped already (a producer done) has no pid any more
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            while proc.returncode is None:
                pid, status = os.waitpid(proc.pid, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG: never blocks)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                    deadline = time.monotonic() + 5
                await asyncio.sleep(0.02)
        self.procs.clear()

    async def wait(self, timeout: float) -> None:
        """Waits for every process to exit on its own (a producer that has sent all its jobs)."""
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.label} processes still running after {timeout:.0f}s")
            await asyncio.sleep(0.02)
        failed = [(n, rc) for n, rc in self.exited() if rc != 0]
        if failed:
            raise RuntimeError(f"{self.label} processes failed: {failed}")


def module_argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def _high_water_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None
