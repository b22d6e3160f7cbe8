"""Execution intervals of every attempt, and how long two attempts of one job overlapped.

Handlers append a start and an end line per attempt to their worker's own file, flushed at once,
so a killed worker's lines survive it. Times come from /proc/uptime (10 ms resolution): the
clock-skew fault shifts every clock call of a skewed worker, monotonic ones included, but not a
file the kernel writes, so intervals from different workers compare.
An attempt with no end line belongs to a worker that was killed: it ended at the kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tenure import JobContext

ATTEMPTS_ENV = "TENURE_SOAK_ATTEMPTS"


def host_clock() -> float:
    """Seconds since boot, as the kernel reports them to every process alike."""
    with open("/proc/uptime", encoding="ascii") as f:
        return float(f.read().split()[0])


class AttemptLog:
    """One worker's append-only attempt file (path from $TENURE_SOAK_ATTEMPTS; off when unset)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    def _write(self, record: dict[str, Any]) -> None:
        path = os.environ.get(ATTEMPTS_ENV)
        if not path:
            return
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is None:
                self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the worker
            self._file.write(line)
            self._file.flush()

    @contextlib.contextmanager
    def running(self, ctx: JobContext) -> Iterator[None]:
        key = {"job": ctx.job_id, "token": ctx.token}
        self._write({**key, "start": host_clock()})
        outcome = "raised"
        try:
            yield
            outcome = "returned"
        finally:
            self._write({**key, "end": host_clock(), "outcome": outcome})


@dataclass(frozen=True)
class Interval:
    job: int
    token: int
    worker: str
    start: float
    end: float
    ended_by_kill: bool


@dataclass(frozen=True)
class Overlaps:
    attempts: int
    killed_mid_attempt: int
    jobs_run_twice_at_once: int
    max_window: float
    max_window_job: int | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "killed_mid_attempt": self.killed_mid_attempt,
            "jobs_run_twice_at_once": self.jobs_run_twice_at_once,
            "max_window_s": round(self.max_window, 3),
            "max_window_job": self.max_window_job,
        }


def read_intervals(files: dict[str, Path], killed_at: dict[str, float], finished: float) -> list[Interval]:
    """Every attempt of every worker; `killed_at` maps a worker name to its SIGKILL time."""
    intervals: list[Interval] = []
    for worker, path in files.items():
        starts: dict[tuple[int, int], float] = {}
        ends: dict[tuple[int, int], float] = {}
        with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by SIGKILL
                key = (int(rec["job"]), int(rec["token"]))
                if "start" in rec:
                    starts[key] = float(rec["start"])
                else:
                    ends[key] = float(rec["end"])
        for key, start in starts.items():
            end = ends.get(key)
            cut = end is None
            if end is None:
                end = killed_at.get(worker, finished)
            intervals.append(Interval(key[0], key[1], worker, start, end, cut))
    return intervals


def _frozen_within(start: float, end: float, frozen: list[tuple[float, float]]) -> float:
    clipped = sorted((max(a, start), min(b, end)) for a, b in frozen if b > start and a < end)
    total, reach = 0.0, start
    for a, b in clipped:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def overlaps(intervals: list[Interval], frozen: dict[str, list[tuple[float, float]]]) -> Overlaps:
    """The longest time two attempts of one job were executing at the same moment.

    Time a worker spent stopped (SIGSTOP) is not execution and is left out; time blocked on a
    dropped network is counted, since the process was running and could have acted.
    """
    by_job: dict[int, list[Interval]] = defaultdict(list)
    for i in intervals:
        by_job[i.job].append(i)
    worst, worst_job, doubled = 0.0, None, 0
    for job, runs in by_job.items():
        runs.sort(key=lambda r: r.start)
        job_worst = 0.0
        for n, a in enumerate(runs):
            for b in runs[n + 1 :]:
                start, end = max(a.start, b.start), min(a.end, b.end)
                if end <= start:
                    continue
                stopped = frozen.get(a.worker, []) + frozen.get(b.worker, [])
                job_worst = max(job_worst, end - start - _frozen_within(start, end, stopped))
        if job_worst > 0:
            doubled += 1
            if job_worst > worst:
                worst, worst_job = job_worst, job
    return Overlaps(len(intervals), sum(i.ended_by_kill for i in intervals), doubled, worst, worst_job)
