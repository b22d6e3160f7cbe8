"""Contention: the largest drain again with more worker processes (8 at standard sizes), Tenure
and the raw loop at the reference claim size, each to be set against its own drain at the run's
process count (the throughput section). More processes contend for the same rows, locks, WAL
flushes and cores; what each contender keeps of its rate among them is the figure. Interleaved
round by round like every drain, the median standing."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from tenure.lab.bench.contenders import RAW_REFERENCE_BATCH
from tenure.lab.bench.rounds import Drain, DrainRounds, median_run
from tenure.lab.bench.sections import raw_drain, tenure_drain


async def contention(dsn: str, rounds: DrainRounds, processes: int) -> dict[str, Any]:
    size = max(rounds.sizes)
    crowded = dataclasses.replace(rounds, sizes=(size,), processes=processes)
    contenders = rounds.contenders
    drains: dict[str, Drain] = {
        "tenure": partial(tenure_drain, dsn, contenders, processes=processes),
        "raw": partial(raw_drain, dsn, contenders, processes=processes, batch=RAW_REFERENCE_BATCH),
    }
    swept = f"{processes} processes, Tenure and the raw loop at claim size {RAW_REFERENCE_BATCH}"
    runs = await crowded.interleaved("contention", swept, drains)
    return {
        "processes": processes,
        "jobs": size,
        "repeats": rounds.repeats,
        "tenure": median_run(runs[("tenure", size)]),
        "raw": median_run(runs[("raw", size)]) | {"batch": RAW_REFERENCE_BATCH},
    }
