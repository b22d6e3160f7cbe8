"""How big each section runs. `smoke` is for CI (about a minute on a quiet 2-core machine);
`standard` is the default (drains of 30k and 50k jobs for every contender, the ceiling swept over
five claim sizes: 15-20 minutes on 2 cores); `full` adds the 1M-job backlog, 1M jobs not yet
due and 1M waiting their turn (25-30 minutes). The waits section leaves 1M jobs waiting for signals
at the standard size already: its target is stated at a million, and loading them takes about a
minute."""

from __future__ import annotations

from dataclasses import dataclass, field

#: The benchmark's sections, in the order a run takes them (`tenure bench --sections`). Named here,
#: beside their sizes, so that the CLI knows them without importing the benchmark itself.
SECTIONS = (
    "copy",
    "throughput",
    "peers",
    "contention",
    "endtoend",
    "latency",
    "backlog",
    "recovery",
    "scheduled",
    "fairness",
    "waits",
    "unique",
    "limits",
    "workflows",
)


@dataclass(frozen=True)
class Sizes:
    """The standard run's sizes, unless given."""

    #: Jobs per throughput drain: every contender drains each size.
    drain_sizes: tuple[int, ...] = (30_000, 50_000)
    latency_probes: int = 150
    backlogs: tuple[int, ...] = (10_000, 100_000)
    backlog_window: float = 4.0  # seconds of draining measured at each backlog
    snapshot_window: float = 20.0  # seconds of draining measured while a snapshot is held
    recovery_jobs: int = 100_000
    copy_jobs: int = 100_000
    not_yet_due: int = 100_000  # jobs due later, in the queue the claim is timed on
    waiting: int = 100_000  # the backlog that waits through the simulated hour of the fairness section
    fairness_step: float = 1.0  # seconds between the periodic passes over that hour
    claim_samples: int = 15
    #: Jobs of the waits section that each wait for a signal of their own and are resumed by it.
    signal_probes: int = 200
    #: Jobs left waiting for signals while the waits section times the claim and the deadline pass.
    waiting_for_signals: int = 1_000_000
    unique_enqueues: int = 2000  # single enqueues of each kind in the unique section
    limit_jobs: int = 10_000  # jobs claimed and completed per variant in the limits section
    drain_largest: bool = False  # drain the largest backlog to the end instead of for a window
    repeats: int = 3  # throughput drains per contender, interleaved; the median is reported
    peers: tuple[str, ...] = field(default=("pgqueuer", "procrastinate"))
    #: Claim sizes of the raw loop swept for the ceiling (Tenure's own claim batch is added).
    ceiling_batches: tuple[int, ...] = (20, 50, 100, 200, 500)
    #: PgQueuer batch sizes swept for its best.
    pgqueuer_batches: tuple[int, ...] = (10, 25, 50, 100, 200, 400)
    #: Tenure's claim batches swept beside PgQueuer's, each with concurrency twice the batch as
    #: PgQueuer's are; Tenure's own settings (the run's --concurrency and --claim-batch) run too.
    tenure_claim_batches: tuple[int, ...] = (200, 400)
    #: Worker processes of the contention section's drains (Tenure, and the raw loop claiming 100).
    contention_processes: int = 8
    end_to_end_jobs: int = 20_000  # jobs enqueued one per transaction while workers drain
    #: End-to-end runs per contender, interleaved; the median is reported. More than the drains':
    #: every enqueue is a durable commit, so its rate follows the disk's flush time, which moves
    #: by half within minutes on a shared machine (docs/performance.md, twenty-third round).
    end_to_end_repeats: int = 5
    producer_connections: int = 10  # connections per producer process, each one job at a time
    workflow_steps: int = 20_000  # plain jobs, and steps of chains, claimed and completed each
    fan_in: int = 10_000  # parallel steps before one fan-in step
    fan_out: int = 99_999  # children of one root (the largest workflow), released by the workflow pass

    @property
    def jobs(self) -> int:
        """The largest drain: the one other sections compare against."""
        return max(self.drain_sizes)


SIZES = {
    "smoke": Sizes(
        drain_sizes=(800, 1600),
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
        signal_probes=15,
        waiting_for_signals=5000,
        repeats=1,
        unique_enqueues=400,
        limit_jobs=400,
        ceiling_batches=(20, 100),
        pgqueuer_batches=(50,),
        tenure_claim_batches=(50,),
        contention_processes=3,  # one more than the run's 2: a worker process takes ~1 s to start
        end_to_end_jobs=300,
        end_to_end_repeats=1,
        producer_connections=4,
        workflow_steps=500,
        fan_in=10_000,
        fan_out=5_000,
    ),
    "standard": Sizes(),
    "full": Sizes(
        latency_probes=300,
        backlogs=(10_000, 100_000, 1_000_000),
        backlog_window=8.0,
        snapshot_window=60.0,
        copy_jobs=200_000,
        not_yet_due=1_000_000,
        waiting=1_000_000,
        drain_largest=True,
        end_to_end_jobs=50_000,
    ),
}
