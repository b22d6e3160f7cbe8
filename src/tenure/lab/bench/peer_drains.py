"""The peers' drains, each at its best settings, at the run's sizes.

PgQueuer: as many processes as Tenure's, `batch_size` swept (`max_concurrent_tasks` twice each),
interleaved round by round like the raw ceiling, the best median at each size standing. Tenure
drains in the same rounds at its run's own settings and at each claim batch of the sweep given
(concurrency twice the batch, as PgQueuer's), its best median standing too: each system at its
best, and the targets against PgQueuer are judged on Tenure's. (Judged on the throughput
section's Tenure drain, minutes apart, the CPU ratio of code whose alternated drains measured the
same spread from 0.85x to 1.18x across runs as the machine's speed drifted.)
Procrastinate: once per size, with a pool sized for its concurrency as its docs advise, on a
tenth of each size (it runs 20-50x slower than the others, so the full sizes would take minutes;
started behind the gate, its rate over that many jobs is steady)."""

from __future__ import annotations

from functools import partial
from typing import Any

from tenure.lab.bench import peers
from tenure.lab.bench.contenders import Contenders, tenure_settings
from tenure.lab.bench.rounds import Drain, DrainRounds, best_of, median_run, setting_sweep
from tenure.lab.bench.sections import peer_drain, tenure_drain

#: PgQueuer's batch where the peers section did not sweep it (the end-to-end section alone): its
#: best in the standard runs so far.
PGQUEUER_UNSWEPT_BATCH = 100
#: Procrastinate drains this fraction of each size.
SLOW_PEER_FRACTION = 10


async def pgqueuer_best(
    dsn: str,
    rounds: DrainRounds,
    batches: tuple[int, ...],
    tenure_dsn: str | None = None,
    tenure_batches: tuple[int, ...] = (),
) -> dict[str, Any]:
    """PgQueuer's drains at each batch size, and with `tenure_dsn` Tenure's beside them in the
    same rounds, at the run's settings and at each of `tenure_batches` (`tenure_sweep` at each
    size, and its best as `tenure_beside`)."""
    contenders = rounds.contenders
    drains: dict[int | str, Drain] = {
        batch: partial(peer_drain, "pgqueuer", dsn, contenders, processes=rounds.processes, batch=batch)
        for batch in batches
    }
    settings: dict[str, Contenders] = {}
    if tenure_dsn is not None:
        settings = tenure_settings(contenders, tenure_batches)
        for key, tenure_contenders in settings.items():
            drains[key] = partial(tenure_drain, tenure_dsn, tenure_contenders, processes=rounds.processes)
    swept = f"batch sizes {list(batches)}"
    if settings:
        swept += f", and Tenure's drain at claim batches {[c.claim_batch for c in settings.values()]}"
    runs = await rounds.interleaved("peer pgqueuer", swept, drains)
    by_size: dict[str, dict[str, Any]] = {}
    for size in rounds.sizes:
        sweep = {
            b: median_run(runs[(b, size)]) | {"max_concurrent_tasks": peers.pgqueuer_max_concurrent(b)}
            for b in batches
        }
        best = best_of(sweep)
        by_size[str(size)] = {
            "batch_sweep": {str(b): r for b, r in sweep.items()},
            "best": sweep[best] | {"batch": best},
        }
        if settings:
            tenure_sweep = setting_sweep(runs, settings, size)
            tenure_best = tenure_sweep[best_of(tenure_sweep)]
            by_size[str(size)] |= {"tenure_sweep": tenure_sweep, "tenure_beside": tenure_best}
    primary = by_size[str(max(rounds.sizes))]["best"]
    return {"version": peers.version("pgqueuer"), "batches": list(batches), "by_size": by_size, **primary}


async def procrastinate_sized(dsn: str, rounds: DrainRounds, max_connections: int) -> dict[str, Any]:
    contenders, sizes, processes = rounds.contenders, rounds.sizes, rounds.processes
    concurrency = peers.procrastinate_concurrency(contenders.concurrency, processes, max_connections)
    by_size: dict[str, dict[str, Any]] = {}
    for size in sizes:
        jobs = max(1, size // SLOW_PEER_FRACTION)
        rounds.log(f"peer procrastinate: {jobs} jobs, {processes} processes x concurrency {concurrency}")
        result = await peer_drain("procrastinate", dsn, contenders, jobs, processes, concurrency=concurrency)
        by_size[str(size)] = result.as_dict()
    return {
        "version": peers.version("procrastinate"),
        "concurrency_per_process": concurrency,
        "pool_max_size": concurrency + 1,
        "server_max_connections": max_connections,
        "jobs_fraction": f"1/{SLOW_PEER_FRACTION} of each size",
        "by_size": by_size,
        **by_size[str(max(sizes))],
    }
