"""Worker processes of any contender: started as real OS processes, stopped with SIGTERM, and
their peak memory read from the kernel just before they are stopped.

The peak is VmHWM of /proc/<pid>/status, the high-water mark of the process's own address space.
Not ru_maxrss from wait4: Linux carries the forking parent's high-water mark over exec into it,
so every child would report at least the benchmark's own size."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field


@dataclass
class ProcessGroup:
    argv: list[str]
    count: int
    env: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    peak_rss_kib: list[int] = field(default_factory=list)

    def start(self) -> None:
        env = {**os.environ, **self.env}
        for _ in range(self.count):
            self.procs.append(subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL))

    async def stop(self, timeout: float = 20.0) -> None:
        self.peak_rss_kib.extend(filter(None, (_high_water_kib(p.pid) for p in self.procs)))
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            while True:
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
