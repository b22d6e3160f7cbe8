"""Where a worker's CPU goes: `python -m tenure.lab.bench.profile [--jobs N] [--tool py-spy|cprofile]`.

Two drains of N no-op jobs by one real worker process (python -m tenure.lab.bench.tenure_worker,
the runtime `tenure worker` runs), both started behind the start gate so that start-up is left
out. The first runs bare: its CPU time (user + system, from the kernel) between the gate's
opening and the stop, divided by the jobs, is the worker's CPU per job. The second runs under a
profiler from the gate's opening: py-spy sampling the process from outside (little overhead;
needs ptrace), or cProfile inside it on CPU time (exact call counts, several times the cost).
Each function's share of the profile is also given in microseconds per job: its share times the
bare run's CPU per job. cProfile counts every resumption of a coroutine as a call.

Creates the scratch database tenure_bench_<pid>_profile on the server (--dsn, $TENURE_DSN or the
embedded one) and drops it at the end."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenure import Tenure, WorkerOptions
from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import DrainResult, drain
from tenure.lab.bench.procs import ProcessGroup
from tenure.lab.bench.sections import drain_timeout, load, reset
from tenure.lab.bench.server import Databases, check_server

TOOLS = ("py-spy", "cprofile")
#: Functions that every sample passes through on its way in (the entry point and the event
#: loop's own run methods), by (name, file): left out of the cumulative ranking, which they
#: would fill. py-spy names methods with their class, cProfile without.
ENTRY_FRAMES = {
    ("<module>", "tenure/lab/bench/tenure_worker.py"),
    ("main", "tenure/lab/bench/tenure_worker.py"),
    ("run", "tenure/worker/worker.py"),  # the supervisor, awaiting the claim loop
    ("_run", "tenure/worker/worker.py"),
    ("_run_code", "<frozen runpy>"),
    ("_run_module_as_main", "<frozen runpy>"),
    ("run", "asyncio/runners.py"),
    ("run_until_complete", "asyncio/base_events.py"),
    ("run_forever", "asyncio/base_events.py"),
    ("_run_once", "asyncio/base_events.py"),
    ("_run", "asyncio/events.py"),
    ("<method 'run' of '_contextvars.Context' objects>", ""),
}


def is_entry_frame(function: str) -> bool:
    name, _, where = function.partition(" (")
    return (name.rsplit(".", 1)[-1], where.rstrip(")")) in ENTRY_FRAMES or (function, "") in ENTRY_FRAMES


PY_SPY_RATE = 250  # samples a second


def short_path(path: str) -> str:
    """A source file as a reader finds it: from the package on, not the whole install path."""
    for marker in ("/site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "/lib/python3" and "/" in tail else tail
    return path


def _function(frame: str) -> str:
    """'name (file:line)' -> 'name (short file)': the samples of one function, whatever line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({short_path(where.rstrip(')').rsplit(':', 1)[0])})" if where else name


def py_spy_profile(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, own samples by function, samples by function anywhere in the stack) from
    py-spy's raw (collapsed) output: one 'frame;frame;... count' line per distinct stack."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for name in set(frames):
            total[name] += count
    return samples, own, total


def cprofile_profile(path: str) -> tuple[float, Counter[str], Counter[str], dict[str, int]]:
    """(CPU seconds, own seconds by function, cumulative seconds, calls) from cProfile stats."""
    stats = pstats.Stats(path)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    calls: dict[str, int] = {}
    entries = stats.stats.items()  # type: ignore[attr-defined]
    for (file, _line, name), (_prim, ncalls, tottime, cumtime, _callers) in entries:
        where = f"{name} ({short_path(file)})" if file != "~" else name
        own[where] += tottime
        total[where] = max(total[where], cumtime)
        calls[where] = calls.get(where, 0) + ncalls
    return sum(own.values()), own, total, calls


def _top(counts: Counter[str], whole: float, us_per_job: float, n: int) -> list[dict[str, Any]]:
    """The `n` largest, each as a share of the whole (at most 1: cProfile's cumulative time of
    an outer frame can pass the sum of own times by its timer's granularity) and in us per job."""
    top = []
    for name, value in counts.most_common(n):
        share = min(1.0, value / whole)
        top.append({"function": name, "share": round(share, 4), "us_per_job": round(share * us_per_job, 2)})
    return top


async def _profiled_drain(
    dsn: str, contenders: Contenders, jobs: int, tool: str, workdir: Path
) -> tuple[DrainResult, dict[str, Any]]:
    await reset(dsn)
    await load(dsn, jobs)
    if tool == "cprofile":
        stats_file = workdir / "worker.prof"
        group = contenders.tenure(dsn, 1, profile=str(stats_file))

        def start(g: ProcessGroup) -> None:
            for proc in g.procs:
                os.kill(proc.pid, signal.SIGUSR1)

        result = await drain(dsn, group, timeout=drain_timeout(jobs) * 5, on_open=start)
        seconds, own, total, calls = cprofile_profile(str(stats_file))
        return result, {"whole": seconds, "own": own, "total": total, "calls": calls}
    raw_file = workdir / "worker.pyspy"
    spies: list[subprocess.Popen[bytes]] = []

    def attach(g: ProcessGroup) -> None:
        for proc in g.procs:
            argv = ["py-spy", "record", "--pid", str(proc.pid), "--format", "raw", "--output", str(raw_file)]
            argv += ["--rate", str(PY_SPY_RATE), "--nonblocking"]
            spies.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    result = await drain(dsn, contenders.tenure(dsn, 1), timeout=drain_timeout(jobs) * 2, on_open=attach)
    for spy in spies:  # it writes its file when the process it samples exits
        _, stderr = await asyncio.to_thread(spy.communicate, timeout=30)
        if spy.returncode != 0 or not raw_file.exists():
            raise RuntimeError(f"py-spy failed ({spy.returncode}): {stderr.decode(errors='replace')[-500:]}")
    samples, own, total = py_spy_profile(raw_file.read_text(encoding="utf-8", errors="replace"))
    return result, {"whole": float(samples), "own": own, "total": total, "calls": {}}


async def profile(
    server_dsn: str, jobs: int, concurrency: int, claim_batch: int, tool: str, top: int
) -> dict[str, Any]:
    await check_server(server_dsn)
    dbs = Databases(server_dsn)
    contenders = Contenders(concurrency, claim_batch)
    try:
        dsn = await dbs.create("profile", migrated=True)
        await reset(dsn)
        await load(dsn, jobs)
        bare = await drain(dsn, contenders.tenure(dsn, 1), timeout=drain_timeout(jobs))
        with tempfile.TemporaryDirectory(prefix="tenure-profile-") as workdir:
            profiled, found = await _profiled_drain(dsn, contenders, jobs, tool, Path(workdir))
    finally:
        await dbs.drop_all()
    us_per_job = bare.worker_cpu_us_per_job or 0.0
    whole = found["whole"] or 1.0
    calls: dict[str, int] = found["calls"]
    by_own = _top(found["own"], whole, us_per_job, top)
    inner = Counter({k: v for k, v in found["total"].items() if not is_entry_frame(k)})
    by_total = _top(inner, whole, us_per_job, top)
    for entry in by_own + by_total:
        if entry["function"] in calls:
            entry["calls_per_job"] = round(calls[entry["function"]] / max(profiled.jobs, 1), 2)
    return {
        "tool": tool,
        "jobs": jobs,
        "concurrency": concurrency,
        "claim_batch": claim_batch,
        "bare": {
            "jobs_per_second": round(bare.jobs_per_second),
            "worker_cpu_us_per_job": bare.worker_cpu_us_per_job,
            "server_cpu_us_per_job": bare.server_cpu_us_per_job,
        },
        "profiled": {
            "jobs_per_second": round(profiled.jobs_per_second),
            "worker_cpu_us_per_job": profiled.worker_cpu_us_per_job,
            "profile_total": round(whole, 3),
            "profile_unit": "samples" if tool == "py-spy" else "CPU seconds",
        },
        "top_own": by_own,
        "top_cumulative": by_total,
    }


def print_profile(result: dict[str, Any], console: Console) -> None:
    bare, profiled = result["bare"], result["profiled"]
    console.print(
        f"One worker process, {result['jobs']:,} no-op jobs, concurrency {result['concurrency']}, "
        f"claim batch {result['claim_batch']}; start-up left out (start gate)."
    )
    console.print(
        f"worker CPU per job: {bare['worker_cpu_us_per_job']:.0f} us bare "
        f"({bare['jobs_per_second']:,} jobs/s; the server's backends for it: "
        f"{bare['server_cpu_us_per_job'] or 0:.0f} us/job), {profiled['worker_cpu_us_per_job']:.0f} us under "
        f"{result['tool']} ({profiled['jobs_per_second']:,} jobs/s, {profiled['profile_total']:,} "
        f"{profiled['profile_unit']})"
    )
    titles = (("top_own", "own time"), ("top_cumulative", "cumulative time (callees in; entry frames out)"))
    for key, title in titles:
        table = Table(title=f"top {len(result[key])} by {title}; us/job = share x bare CPU per job")
        counted = result["tool"] == "cprofile"
        for col in ("function", "share", "us/job", *(("calls/job",) if counted else ())):
            table.add_column(col, justify="left" if col == "function" else "right")
        for entry in result[key]:
            cells = [escape(entry["function"]), f"{entry['share']:.1%}", f"{entry['us_per_job']:.1f}"]
            table.add_row(*cells, *((str(entry.get("calls_per_job", "")),) if counted else ()))
        console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tenure.lab.bench.profile", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--dsn", default=None, help="server to use (default: $TENURE_DSN or the embedded one)"
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--claim-batch", type=int, default=WorkerOptions().claim_batch)
    default_tool = "py-spy" if shutil.which("py-spy") else "cprofile"
    parser.add_argument("--tool", choices=TOOLS, default=default_tool, help=f"default here: {default_tool}")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    server = Tenure(args.dsn).resolved_dsn()
    result = asyncio.run(profile(server, args.jobs, args.concurrency, args.claim_batch, args.tool, args.top))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_profile(result, Console())


if __name__ == "__main__":
    main()
