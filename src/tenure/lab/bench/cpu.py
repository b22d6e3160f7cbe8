"""CPU time of processes on this machine, from the kernel: the workers', and the server backends'
that served them (when the server runs here too)."""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """CPU seconds of process `pid`, None if it is gone.

    The scheduler's own count (/proc/<pid>/task/*/schedstat, nanoseconds) where the kernel keeps
    it: /proc/<pid>/stat counts in 10 ms clock ticks, too coarse for a small drain (a raw loop
    draining 1,600 jobs read as no CPU at all). Threads that have already exited are not in the
    sum; the benchmark's workers keep theirs to the end."""
    running = _scheduler_seconds(pid)
    return running if running is not None else _tick_seconds(pid)


def _scheduler_seconds(pid: int) -> float | None:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total_ns = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as schedstat:
                total_ns += int(schedstat.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    return total_ns / 1e9


def _tick_seconds(pid: int) -> float | None:
    """User + system CPU seconds from /proc/<pid>/stat, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime: fields 14 and 15


def backend_cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds of each server backend in `pids` that is a postgres process on this machine
    (a server elsewhere has no such processes here, and its figures are left out)."""
    found: dict[int, float] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as comm:
                if not comm.read().startswith("postgres"):
                    continue
        except OSError:
            continue
        seconds = cpu_seconds(pid)
        if seconds is not None:
            found[pid] = seconds
    return found
