"""How big each section runs. `smoke` is for CI (well under a minute); `standard` is the default;
`full` adds the 1M-job backlog, 1M jobs not yet due, 1M waiting and larger drains (about 15-20
minutes on 2 cores)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sizes:
    jobs: int  # jobs per throughput drain
    latency_probes: int
    backlogs: tuple[int, ...]
    backlog_window: float  # seconds of draining measured at each backlog
    snapshot_window: float  # seconds of draining measured while a snapshot is held
    recovery_jobs: int
    copy_jobs: int
    not_yet_due: int  # jobs due later, in the queue the claim is timed on
    waiting: int  # the backlog that waits through the simulated hour of the fairness section
    fairness_step: float  # seconds between the periodic passes over that hour
    claim_samples: int = 15
    unique_enqueues: int = 2000  # single enqueues of each kind in the unique section
    limit_jobs: int = 10_000  # jobs claimed and completed per variant in the limits section
    drain_largest: bool = False  # drain the largest backlog to the end instead of for a window
    repeats: int = 3  # throughput drains per contender, interleaved; the median is reported
    peers: tuple[str, ...] = field(default=("pgqueuer", "procrastinate"))


SIZES = {
    "smoke": Sizes(
        jobs=1500,
        latency_probes=15,
        backlogs=(2000, 5000),
        backlog_window=0.6,
        snapshot_window=0.6,
        recovery_jobs=2000,
        copy_jobs=5000,
        not_yet_due=5000,
        waiting=5000,
        fairness_step=60.0,
        claim_samples=5,
        repeats=1,
        unique_enqueues=400,
        limit_jobs=1000,
    ),
    "standard": Sizes(
        jobs=30_000,
        latency_probes=150,
        backlogs=(10_000, 100_000),
        backlog_window=4.0,
        snapshot_window=20.0,
        recovery_jobs=100_000,
        copy_jobs=100_000,
        not_yet_due=100_000,
        waiting=100_000,
        fairness_step=1.0,
    ),
    "full": Sizes(
        jobs=50_000,
        latency_probes=300,
        backlogs=(10_000, 100_000, 1_000_000),
        backlog_window=8.0,
        snapshot_window=60.0,
        recovery_jobs=100_000,
        copy_jobs=200_000,
        not_yet_due=1_000_000,
        waiting=1_000_000,
        fairness_step=1.0,
        drain_largest=True,
    ),
}
