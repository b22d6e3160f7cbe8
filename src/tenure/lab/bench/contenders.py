"""The worker process groups of each contender, with the run's settings, and how the start gate
recognises each one's claim (a fragment of its claim statement, as the server shows it)."""

from __future__ import annotations

from tenure.db.sqlfiles import named_queries, quote_schema
from tenure.lab.bench import peers
from tenure.lab.bench.procs import ProcessGroup, module_argv
from tenure.lab.bench.queries import bench_queries
from tenure.lab.bench.server import SCHEMA

#: The raw loop's claim size the drain targets compare Tenure with (a worker's own default claim);
#: the ceiling, the best claim size of the sweep, is reported beside it.
RAW_REFERENCE_BATCH = 100


#: pg_stat_activity shows a statement's first track_activity_query_size bytes (1024 by default):
#: a marker must stand within them.
SHOWN_BYTES = 1000


def _shared_fragment(queries: dict[str, str], names: tuple[str, ...], fragment: str) -> str:
    """`fragment`, checked to be in the first SHOWN_BYTES of the text of each statement `names`
    (with its placeholders, longer than the server's $n, so the check errs the safe way)."""
    missing = [
        name for name in names if fragment not in queries[name].encode()[:SHOWN_BYTES].decode(errors="ignore")
    ]
    if missing:
        raise RuntimeError(f"statements {missing} no longer show {fragment!r}: the gate misses them")
    return fragment


def _first_line(sql: str) -> str:
    return sql.strip().splitlines()[0]


def loops_for(concurrency: int, batch: int) -> int:
    """Raw loops per process: as many batches in flight as a Tenure worker's slots hold."""
    return max(1, concurrency // batch)


def tenure_settings(
    contenders: Contenders, claim_batches: tuple[int, ...], key: str = "tenure"
) -> dict[str, Contenders]:
    """Tenure's settings in a section's rounds, by key: the run's own (`key`), and each claim
    batch of the sweep with concurrency twice the batch (PgQueuer's rule for its cap), one a
    setting (`key`_batch). Tenure at its best is the best of these."""
    found = {key: contenders}
    for batch in claim_batches:
        swept = Contenders(2 * batch, batch)
        if (swept.concurrency, swept.claim_batch) != (contenders.concurrency, contenders.claim_batch):
            found[f"{key}_{batch}"] = swept
    return found


class Contenders:
    def __init__(self, concurrency: int, claim_batch: int) -> None:
        self.concurrency = concurrency
        self.claim_batch = claim_batch
        #: Batches a Tenure worker can hold at once; the raw loop keeps as many in flight.
        self.raw_loops = loops_for(concurrency, claim_batch)

    def tenure(
        self, dsn: str, processes: int, env: dict[str, str] | None = None, *, profile: str | None = None
    ) -> ProcessGroup:
        """Tenure worker processes; with `profile`, under cProfile from SIGUSR1 (tenure_worker)."""
        argv = module_argv(
            "tenure.lab.bench.tenure_worker",
            *("--dsn", dsn, "--concurrency", str(self.concurrency), "--claim-batch", str(self.claim_batch)),
            *(("--profile", profile) if profile else ()),
        )
        marker = _first_line(named_queries(SCHEMA)["job_claim"])
        return ProcessGroup(argv, processes, env or {}, label="tenure", claim_marker=marker)

    def raw(self, dsn: str, processes: int, batch: int | None = None) -> ProcessGroup:
        """The raw-SQL loop claiming `batch` (default: Tenure's claim batch) at a time."""
        batch = batch or self.claim_batch
        argv = module_argv(
            "tenure.lab.bench.raw_worker",
            *("--dsn", dsn, "--batch", str(batch), "--loops", str(loops_for(self.concurrency, batch))),
        )
        marker = _first_line(bench_queries(SCHEMA)["bench_raw_claim"])
        return ProcessGroup(argv, processes, label="raw", claim_marker=marker)

    def peer(
        self,
        name: str,
        dsn: str,
        processes: int,
        env: dict[str, str] | None = None,
        *,
        batch: int | None = None,
        concurrency: int | None = None,
    ) -> ProcessGroup:
        argv = module_argv(
            "tenure.lab.bench.peers",
            name,
            *("--dsn", dsn, "--concurrency", str(concurrency or self.concurrency)),
            *("--batch", str(batch or self.claim_batch)),
        )
        return ProcessGroup(argv, processes, env or {}, label=name, claim_marker=peers.CLAIM_MARKERS[name])

    def producers(self, kind: str, dsn: str, processes: int, jobs: int, connections: int) -> ProcessGroup:
        """`processes` producer processes enqueueing `jobs` in all, one job per transaction."""
        argv = module_argv(
            "tenure.lab.bench.producer",
            kind,
            *("--dsn", dsn, "--jobs", str(jobs // processes), "--connections", str(connections)),
        )
        # A producer is ready once its first enqueue waits at the gate. PgQueuer's statement text is
        # its own, but its producers run nothing else on the queue table that the gate locks.
        markers = {
            # A lone job's enqueue: job_insert_one's, or job_hand_off's when its queue is at rest
            # (docs/hand-off.md), as a producer's first jobs are: the one table both name early
            # (job_hand_off's INSERT comes after its CTEs, past what pg_stat_activity shows).
            "tenure": _shared_fragment(
                named_queries(SCHEMA), ("job_insert_one", "job_hand_off"), f"{quote_schema(SCHEMA)}.jobs"
            ),
            "raw": _first_line(bench_queries(SCHEMA)["bench_raw_insert"]),
        }
        return ProcessGroup(argv, processes, label=f"{kind}producer", claim_marker=markers.get(kind))
