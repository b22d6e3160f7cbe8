"""Drains repeated round by round, and each figure judged by its target's rule (no server needed)."""

from __future__ import annotations

from tenure.lab.bench.contenders import Contenders
from tenure.lab.bench.drain import DrainResult
from tenure.lab.bench.rounds import Drain, DrainRounds, best_of, median_run
from tenure.lab.bench.rows import ratio_at_least, row, value_below


def _result(rate: float) -> DrainResult:
    return DrainResult(
        jobs=100,
        seconds=1.0,
        jobs_per_second=rate,
        wal_bytes_per_job=0.0,
        commits_per_job=0.0,
        peak_rss_mib=1.0,
    )


async def test_each_round_runs_every_drain_at_every_size() -> None:
    """Each round runs every drain once per size, runs are kept by (drain, size), and the best median wins."""
    ran: list[tuple[int, int]] = []

    def drain_at(batch: int) -> Drain:
        async def run(size: int) -> DrainResult:
            ran.append((batch, size))
            return _result(float(batch * size + len(ran)))

        return run

    said: list[str] = []
    rounds = DrainRounds(Contenders(100, 20), (10, 30), processes=2, repeats=2, log=said.append)
    runs = await rounds.interleaved("sweep", "batches [1, 2]", {1: drain_at(1), 2: drain_at(2)})

    assert ran == [(1, 10), (2, 10), (1, 30), (2, 30)] * 2
    assert said == [
        "sweep round 1/2: sizes [10, 30], batches [1, 2]",
        "sweep round 2/2: sizes [10, 30], batches [1, 2]",
    ]
    assert {key: len(results) for key, results in runs.items()} == {
        (1, 10): 2,
        (2, 10): 2,
        (1, 30): 2,
        (2, 30): 2,
    }
    sweep = {batch: median_run(runs[(batch, 30)]) for batch in (1, 2)}
    assert sweep[2]["all_jobs_per_second"] == [64, 68] and sweep[2]["jobs_per_second"] == 68.0
    assert best_of(sweep) == 2


def test_a_figure_is_judged_only_on_what_was_measured() -> None:
    """A ratio rule gives no verdict without a baseline and judges the ratio; a value rule, the value."""
    assert row("s", "f", 5.0, "jobs/s", "b", None, ">= 2x", ratio_at_least(2))["met"] is None
    judged = row("s", "f", 5.0, "jobs/s", "b", 2.0, ">= 2x", ratio_at_least(2))
    assert judged["ratio"] == 2.5 and judged["met"] is True
    assert row("s", "f", 0.5, "bytes", "b", None, "< 1 B", value_below(1))["met"] is True
    assert row("s", "f", 5.0, "jobs/s", "b", 2.0)["met"] is None
