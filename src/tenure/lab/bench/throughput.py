"""Drain throughput from a COPY preload, at each of the run's sizes: Tenure against the raw-SQL
ceiling, where the ceiling is the raw loop at the best claim size it can use.

Tenure drains at the run's own settings and, given claim batches, at each of them with
concurrency twice the batch (contenders.tenure_settings); its best median at each size is what
the drain target sets against the raw loop claiming 100, as the peers section sets it against
PgQueuer's best: each system at its best, the raw loop at the claim size the target names.

The raw loop is swept over claim sizes (with `concurrency / batch` loops per process, at least
one, so that as many jobs are in flight as a Tenure worker's slots hold, or one batch when a
batch is larger), and at each size of run the best median stands as the ceiling. Every
configuration runs `repeats` times, interleaved round by round so that load from elsewhere on
the machine falls on all of them alike; the median run stands for each. The sweep always holds
the reference claim size (RAW_REFERENCE_BATCH), which the drain target compares with. The
one-process pair (Tenure, and the raw loop at the ceiling's claim size) runs at the largest size.

Every drain of Tenure and of the raw loop also counts its row writes to the jobs table
(table_writes.py); the index entries a job writes at each step are counted once, on the schema
itself (index_entries.py)."""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any

from tenure.lab.bench.contenders import RAW_REFERENCE_BATCH, loops_for, tenure_settings
from tenure.lab.bench.drain import DrainResult
from tenure.lab.bench.index_entries import index_entries
from tenure.lab.bench.rounds import Drain, DrainRounds, best_of, median_run, setting_sweep
from tenure.lab.bench.sections import raw_drain, tenure_drain

#: The key of Tenure's drain at the run's own settings.
TENURE_N = "tenure_n"


def startup_summary(runs: dict[str, list[DrainResult]]) -> dict[str, float | None]:
    """Median start-up (spawn to every process's first claim at the gate) of each contender."""
    summary: dict[str, float | None] = {}
    for key, results in runs.items():
        seconds = [r.startup_seconds for r in results if r.startup_seconds is not None]
        summary[key] = round(statistics.median(seconds), 3) if seconds else None
    return summary


async def throughput(
    dsn: str, rounds: DrainRounds, batches: tuple[int, ...], tenure_batches: tuple[int, ...] = ()
) -> dict[str, Any]:
    contenders, sizes, processes, repeats = rounds.contenders, rounds.sizes, rounds.processes, rounds.repeats
    batches = tuple(sorted({*batches, contenders.claim_batch, RAW_REFERENCE_BATCH}))
    settings = tenure_settings(contenders, tenure_batches, key=TENURE_N)
    drains: dict[str, Drain] = {
        key: partial(tenure_drain, dsn, setting, processes=processes) for key, setting in settings.items()
    }
    for batch in batches:
        drains[f"raw_{batch}"] = partial(raw_drain, dsn, contenders, processes=processes, batch=batch)
    tenure_claims = [setting.claim_batch for setting in settings.values()]
    swept = f"raw claim sizes {list(batches)}, Tenure's claim batches {tenure_claims}"
    runs = await rounds.interleaved("throughput", swept, drains)

    by_size: dict[str, dict[str, Any]] = {}
    for size in sizes:
        sweep = {
            b: median_run(runs[(f"raw_{b}", size)]) | {"loops": loops_for(contenders.concurrency, b)}
            for b in batches
        }
        best = best_of(sweep)
        tenure_sweep = setting_sweep(runs, settings, size)
        by_size[str(size)] = {
            "tenure_n": tenure_sweep[TENURE_N],
            "tenure_sweep": tenure_sweep,
            "tenure_best": tenure_sweep[best_of(tenure_sweep)],
            "ceiling_sweep": {str(b): r for b, r in sweep.items()},
            "ceiling": sweep[best] | {"batch": best},
            "raw_claim_batch": sweep[contenders.claim_batch] | {"batch": contenders.claim_batch},
            "raw_reference": sweep[RAW_REFERENCE_BATCH] | {"batch": RAW_REFERENCE_BATCH},
        }
    primary = max(sizes)
    ceiling_batch = by_size[str(primary)]["ceiling"]["batch"]
    rounds.log(
        f"throughput: 1 process, Tenure and the raw loop at claim size {ceiling_batch}, {primary} jobs"
    )
    single: dict[str, list[DrainResult]] = {"tenure_1": [], "raw_1": []}
    for _ in range(repeats):
        single["tenure_1"].append(await tenure_drain(dsn, contenders, primary, 1))
        single["raw_1"].append(await raw_drain(dsn, contenders, primary, 1, ceiling_batch))
    top = by_size[str(primary)]
    startups = {
        "tenure": [r for (key, _), rs in runs.items() if key == TENURE_N for r in rs],
        "raw": [r for (key, _), rs in runs.items() if key.startswith("raw_") for r in rs],
    }
    return {
        "sizes": list(sizes),
        "primary_size": primary,
        "jobs": primary,
        "repeats": repeats,
        "processes": processes,
        "ceiling_batches": list(batches),
        "by_size": by_size,
        # The largest size's figures under the names the other sections and the report read.
        "tenure_n": top["tenure_n"],
        "raw_n": top["ceiling"],
        "tenure_1": median_run(single["tenure_1"]),
        "raw_1": median_run(single["raw_1"]) | {"batch": ceiling_batch},
        "startup_seconds": startup_summary(startups),
        "jobs_table": await index_entries(dsn),
    }
