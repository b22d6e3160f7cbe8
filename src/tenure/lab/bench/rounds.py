"""Drains repeated round by round: each configuration runs once a round, so that load from
elsewhere on the machine falls on all of them alike, and the median run of each stands. Of a
swept setting (the raw loop's claim size, PgQueuer's batch size) the best median stands."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import DrainResult

Key = TypeVar("Key", bound=Hashable)
#: A drain of the given number of jobs.
Drain = Callable[[int], Awaitable[DrainResult]]


@dataclass(frozen=True)
class DrainRounds:
    """What the drain sections of a run share: the contenders, the sizes each one drains, the
    worker processes of a drain, and how many rounds each configuration runs."""

    contenders: Contenders
    sizes: tuple[int, ...]
    processes: int
    repeats: int
    log: Callable[[str], None] = print

    async def interleaved(
        self, title: str, swept: str, drains: dict[Key, Drain]
    ) -> dict[tuple[Key, int], list[DrainResult]]:
        """Every drain at every size, once a round: the runs of each (drain's key, size)."""
        runs: dict[tuple[Key, int], list[DrainResult]] = {}
        for number in range(self.repeats):
            self.log(f"{title} round {number + 1}/{self.repeats}: sizes {list(self.sizes)}, {swept}")
            for size in self.sizes:
                for key, drain in drains.items():
                    runs.setdefault((key, size), []).append(await drain(size))
        return runs


def median_run(results: list[DrainResult]) -> dict[str, Any]:
    """The run with the median rate, with every run's rate beside it."""
    ranked = sorted(results, key=lambda r: r.jobs_per_second)
    return ranked[len(ranked) // 2].as_dict() | {
        "all_jobs_per_second": [round(r.jobs_per_second) for r in results]
    }


def setting_sweep(
    runs: Mapping[Any, list[DrainResult]], settings: dict[str, Contenders], size: int
) -> dict[str, dict[str, Any]]:
    """The median run of each of Tenure's `settings` at `size`, each naming its setting."""
    return {
        key: median_run(runs[(key, size)]) | {"claim_batch": c.claim_batch, "concurrency": c.concurrency}
        for key, c in settings.items()
    }


def best_of(sweep: dict[Key, dict[str, Any]]) -> Key:
    """The setting whose median rate is highest."""
    return max(sweep, key=lambda setting: sweep[setting]["jobs_per_second"])
