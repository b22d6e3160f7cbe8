"""CPU time of processes on this machine, from the kernel: the workers', and the server backends'
that served them (when the server runs here too)."""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` (/proc/<pid>/stat), None if it is gone."""
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
