-- Queries of the waits section (bench/waits.py): jobs left waiting in bulk, what the deadline pass
-- reads, and when the jobs whose resumption is timed have all gone to wait. None of these is used
-- by Tenure's runtime.

-- name: bench_waits_load
-- %(count)s jobs of %(queue)s, each waiting for a signal to a key of its own with a deadline a day
-- away (spread over that day), as a handler's wait leaves them (job_wait in tenure/db/sql/
-- waits.sql): state 'waiting', no lease, the attempt given back (one below the token it ran with),
-- and one job_waits row named by its key. Each is marked swept, as the recovery pass marks every
-- wait soon after it begins: the sweep's one look is not what the section measures. A higher
-- priority than the pending jobs the claim is timed on, so that an index still holding them would
-- put them first in the claim's way. One statement a chunk: 1M rows in seconds, not hours.
WITH made AS (
    INSERT INTO __schema__.jobs (queue, task, payload, state, priority, available_at, attempt_count,
                                 max_attempts, lease_token, attempted_at)
    SELECT %(queue)s, 'noop', '{}'::jsonb, 'waiting', 10, statement_timestamp(), 0, 20, 1,
           statement_timestamp()
    FROM generate_series(1, %(count)s)
    RETURNING id, queue
)
INSERT INTO __schema__.job_waits (job_id, name, queue, key, state, since, deadline, token, swept)
SELECT id, 'bench-idle:' || id, queue, 'bench-idle:' || id, 'waiting', statement_timestamp(),
       statement_timestamp() + interval '1 day' + (id %% 86400) * interval '1 second', 1, true
FROM made;

-- name: bench_waits_clear
-- Every job and every row that refers to one (waits, signals, effects), at once: a DELETE of a
-- million waiting jobs would cascade to their job_waits rows one trigger call at a time.
TRUNCATE __schema__.jobs CASCADE;

-- name: bench_waits_vacuum
VACUUM (ANALYZE) __schema__.jobs, __schema__.job_waits;

-- name: bench_waits_waiting
-- Jobs waiting now (through job_waits_queue_idx: jobs has no index on its waiting rows).
SELECT count(*) AS n FROM __schema__.job_waits WHERE state = 'waiting';

-- name: bench_waits_scans
-- This transaction's scans so far of the two tables the deadline pass reads: sequential scans and
-- the rows they read, index scans and the rows they fetched from the table.
SELECT relname AS name, seq_scan, seq_tup_read, coalesce(idx_scan, 0) AS idx_scan,
       coalesce(idx_tup_fetch, 0) AS idx_tup_fetch
FROM pg_stat_xact_user_tables
WHERE relid IN ('__schema__.jobs'::regclass, '__schema__.job_waits'::regclass);
