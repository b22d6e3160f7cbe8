"""Why a drain's rate depended on its size (issue 14: 30k against 50k jobs moved Tenure and
PgQueuer in opposite directions). Each contender drains each size three ways, interleaved:

- "first job, counted": the old method: no start gate, timed from the first poll that saw a job
  finished, the unfinished jobs counted at every poll (every 20 ms);
- "gated, counted": behind the start gate, timed from its opening, still counting every poll;
- "gated, probed": tenure bench's method: behind the gate, polling index probes only.

For each: the median rate, the rates of the first and second half of the jobs, and (gated) the
slowest process's start-up. A first half slower than the second is warm-up inside the drain; a
second half slower than the first is a cost that grows with the jobs done.

Usage: PYTHONPATH=src python benchmarks/size_effect.py [SERVER_DSN] [--repeats N] [--sizes A,B]
The server defaults to the embedded one; creates and drops tenure_bench_<pid>_* databases.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Awaitable, Callable

from tenure.db.connect import connect, resolve_dsn
from tenure.lab.bench import peers
from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import PEER_WATCH, DrainResult, drain
from tenure.lab.bench.queries import execute
from tenure.lab.bench.sections import SCHEMA, drain_timeout, load, reset
from tenure.lab.bench.server import Databases

PROCESSES = 2
RAW_BATCH = 100
PGQUEUER_BATCH = 100


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("server", nargs="?", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="30000,50000")
    parser.add_argument("--kinds", default="tenure,raw,pgqueuer", help="a subset of tenure,raw,pgqueuer")
    parser.add_argument("--methods", default="first,counted,probed", help="a subset of first,counted,probed")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    dbs = Databases(resolve_dsn(args.server).dsn)
    contenders = Contenders(concurrency=100, claim_batch=20)
    try:
        dsn = await dbs.create("tenure", migrated=True)
        peer_dsn = await dbs.create("pgqueuer")
        await peers.pgqueuer_setup(peer_dsn)

        async def tenure(size: int, gated: bool, counted: bool) -> DrainResult:
            await reset(dsn)
            await load(dsn, size)
            group = contenders.tenure(dsn, PROCESSES)
            return await drain(dsn, group, timeout=drain_timeout(size), gated=gated, poll_counts=counted)

        async def raw(size: int, gated: bool, counted: bool) -> DrainResult:
            await reset(dsn)
            await load(dsn, size)
            group = contenders.raw(dsn, PROCESSES, RAW_BATCH)
            return await drain(dsn, group, timeout=drain_timeout(size), gated=gated, poll_counts=counted)

        async def pgqueuer(size: int, gated: bool, counted: bool) -> DrainResult:
            async with await connect(peer_dsn) as conn:
                await execute(conn, SCHEMA, "peer_pgqueuer_reset")
            await peers.pgqueuer_enqueue(peer_dsn, size)
            group = contenders.peer("pgqueuer", peer_dsn, PROCESSES, batch=PGQUEUER_BATCH)
            watch = PEER_WATCH["pgqueuer"]
            return await drain(
                peer_dsn, group, watch, timeout=drain_timeout(size), gated=gated, poll_counts=counted
            )

        every_kind: dict[str, tuple[str, Callable[[int, bool, bool], Awaitable[DrainResult]]]] = {
            "tenure": ("tenure", tenure),
            "raw": (f"raw claim {RAW_BATCH}", raw),
            "pgqueuer": (f"pgqueuer batch {PGQUEUER_BATCH}", pgqueuer),
        }
        every_method = {
            "first": ("first job, counted", (False, True)),
            "counted": ("gated, counted", (True, True)),
            "probed": ("gated, probed", (True, False)),
        }
        kinds = dict(every_kind[k] for k in args.kinds.split(","))
        methods = dict(every_method[m] for m in args.methods.split(","))
        runs: dict[tuple[str, int, str], list[DrainResult]] = {}
        for round_number in range(args.repeats):
            print(f"round {round_number + 1}/{args.repeats}", flush=True)
            for size in sizes:
                for kind, measure in kinds.items():
                    for method, (gated, counted) in methods.items():
                        result = await measure(size, gated, counted)
                        runs.setdefault((kind, size, method), []).append(result)
    finally:
        await dbs.drop_all()

    def med(values: list[float | None]) -> str:
        known = [v for v in values if v is not None]
        return f"{statistics.median(known):,.0f}" if known else "-"

    print(f"{PROCESSES} processes, medians of {args.repeats}; rates in jobs/s")
    print(
        f"{'contender':20} {'size':>7} {'method':18} {'rate':>8} {'1st half':>9} {'2nd half':>9} "
        f"{'start-up s':>10} {'spread s':>8}"
    )
    for (kind, size, method), results in runs.items():
        startup = [r.startup_seconds for r in results if r.startup_seconds is not None]
        spread = [r.startup_spread_seconds for r in results if r.startup_spread_seconds is not None]
        print(
            f"{kind:20} {size:7} {method:18} {med([r.jobs_per_second for r in results]):>8} "
            f"{med([r.first_half_jobs_per_second for r in results]):>9} "
            f"{med([r.second_half_jobs_per_second for r in results]):>9} "
            f"{statistics.median(startup) if startup else float('nan'):10.2f} "
            f"{statistics.median(spread) if spread else float('nan'):8.2f}"
        )
        print(f"{'':20} {'':7} {'':18} all: {[round(r.jobs_per_second) for r in results]}")


if __name__ == "__main__":
    asyncio.run(main())
