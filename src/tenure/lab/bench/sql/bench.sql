-- Queries the benchmark itself runs: measurement, setup of synthetic states, and the minimal
-- raw-SQL loop that serves as the ceiling. None of these is used by Tenure's runtime.

-- name: bench_unfinished
-- Jobs not yet finished, through the partial indexes.
SELECT (SELECT count(*) FROM __schema__.jobs WHERE state = 'scheduled')
     + (SELECT count(*) FROM __schema__.jobs WHERE state = 'pending')
     + (SELECT count(*) FROM __schema__.jobs WHERE state = 'running') AS n;

-- name: bench_server_settings
SELECT name, setting, unit
FROM pg_settings
WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'full_page_writes', 'wal_level',
               'shared_buffers', 'max_connections', 'commit_delay', 'wal_sync_method', 'autovacuum',
               'shared_preload_libraries', 'max_wal_size', 'checkpoint_timeout', 'work_mem')
ORDER BY name;

-- name: bench_counters
-- Server-wide WAL position and this database's commit counter (flushed when backends exit).
SELECT pg_current_wal_lsn() AS lsn, xact_commit
FROM pg_stat_database
WHERE datname = current_database();

-- name: bench_wal_bytes_since
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(lsn)s::pg_lsn)::bigint AS bytes;

-- part: raw_lease
-- The lease a raw claim takes: the columns Tenure's claim sets, with fixed durations.
SET state = 'running',
    attempt_count = j.attempt_count + 1,
    lease_token = j.lease_token + 1,
    lease_owner = %(owner)s,
    attempted_at = statement_timestamp(),
    lease_deadline = statement_timestamp() + interval '1 hour',
    lease_expires_at = statement_timestamp() + interval '30 seconds'

-- name: bench_raw_claim
-- The ceiling's claim: the same index order and SKIP LOCKED, the same lease columns. Its due test
-- is written as Tenure's is, so that it cannot be an index condition: on some statistics it made
-- the planner read every pending job through jobs_claimable_by_age_idx and sort them.
WITH candidate AS (
    SELECT id
    FROM __schema__.jobs
    WHERE state = 'pending'
      AND queue = %(queue)s
      AND available_at + interval '0' <= statement_timestamp()
    ORDER BY priority DESC, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
-- By primary key, as Tenure's claim: joined to the candidates, a plan made on the statistics of
-- an empty table (every drain here starts from one) scanned the jobs table for each claim.
UPDATE __schema__.jobs j
__part_raw_lease__
WHERE j.id = ANY(ARRAY(SELECT id FROM candidate))
RETURNING j.id, j.lease_token;

-- name: bench_raw_complete
-- The ceiling's completion: fenced by id, owner, token and unexpired lease, batched via unnest.
-- The state compared as text, as Tenure's fence does, so that the rows are reached by primary key
-- and never through jobs_running_expiry_idx, whose dead entries a drain piles up.
UPDATE __schema__.jobs j
SET state = 'succeeded',
    finished_at = statement_timestamp(),
    lease_owner = NULL,
    lease_expires_at = NULL,
    lease_deadline = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS i(id, token)
WHERE j.id = i.id
  AND j.state::text = 'running'
  AND j.lease_owner = %(owner)s
  AND j.lease_token = i.token
  AND j.lease_expires_at > statement_timestamp();

-- name: bench_lease_all_expired
-- Turns every waiting job into a running one whose lease expired a minute ago (recovery leaves
-- the jobs it recovered scheduled for their backoff, so both waiting states count).
UPDATE __schema__.jobs
SET state = 'running',
    attempt_count = attempt_count + 1,
    lease_token = lease_token + 1,
    lease_owner = 'bench:crashed',
    attempted_at = statement_timestamp() - interval '2 minutes',
    lease_deadline = statement_timestamp() + interval '1 hour',
    lease_expires_at = statement_timestamp() - interval '1 minute'
WHERE state IN ('pending', 'scheduled');

-- name: bench_raw_recover_all
-- The recovery baseline: one plain statement putting every expired lease back, no audit rows.
UPDATE __schema__.jobs
SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL, lease_deadline = NULL
WHERE state = 'running' AND lease_expires_at <= statement_timestamp();

-- name: bench_delete_all
DELETE FROM __schema__.jobs;

-- name: bench_can_create_databases
SELECT rolcreatedb OR rolsuper AS ok FROM pg_roles WHERE rolname = current_user;

-- name: bench_clear_snapshot
SELECT pg_stat_clear_snapshot();

-- name: bench_hold_snapshot
-- Run inside a REPEATABLE READ transaction: its snapshot pins every row version newer than it.
SELECT count(*) AS n FROM __schema__.jobs WHERE id < 0;

-- name: peer_pgqueuer_unfinished
-- PgQueuer deletes finished jobs from its queue table (and logs them elsewhere).
SELECT count(*) AS n FROM pgqueuer;

-- name: peer_procrastinate_unfinished
SELECT count(*) AS n FROM procrastinate_jobs WHERE status IN ('todo', 'doing');

-- name: bench_vacuum
VACUUM (ANALYZE) __schema__.jobs;

-- name: bench_checkpoint
-- Writes out what a bulk load dirtied, so that the writeback does not run under the timings that
-- follow it (superuser or pg_checkpoint).
CHECKPOINT;

-- name: bench_drain_state
-- Polled throughout a drain, so cheap at any backlog: probes of the partial indexes, no count
-- (counting 50k unfinished jobs took 15 ms, which every 20 ms is most of a core).
SELECT EXISTS (SELECT 1 FROM __schema__.jobs WHERE state = 'running') AS started,
       EXISTS (SELECT 1 FROM __schema__.jobs WHERE state = 'running')
       OR EXISTS (SELECT 1 FROM __schema__.jobs WHERE state = 'pending') AS unfinished;

-- name: bench_limits_clear
DELETE FROM __schema__.queue_limits;

-- name: bench_limit_queue
INSERT INTO __schema__.queue_limits (queue, max_running, declared_by)
VALUES (%(queue)s, %(max_running)s, 'bench');

-- name: bench_limit_per_key
-- One running job per key at a time: with jobs spread over many keys it seldom binds, but every
-- claim ranks its window by key and counts each key's live leases.
INSERT INTO __schema__.queue_limits (queue, key_field, max_running_per_key, declared_by)
VALUES (%(queue)s, %(key)s, 1, 'bench');

-- name: bench_gate_tenure
-- The start gate (gate.py): reads pass, every claim, completion and insert waits until commit.
LOCK TABLE __schema__.jobs IN EXCLUSIVE MODE;

-- name: peer_pgqueuer_gate
LOCK TABLE pgqueuer IN EXCLUSIVE MODE;

-- name: peer_procrastinate_gate
LOCK TABLE procrastinate_jobs IN EXCLUSIVE MODE;

-- name: bench_backend_pid
SELECT pg_backend_pid() AS pid;

-- name: bench_gate_waiting
-- The sessions of one process group waiting for the gate's session, by process name; with a
-- marker (a fragment of the contender's claim statement), only the claims among them.
SELECT a.application_name AS name, count(*) AS waiting
FROM pg_stat_activity a
WHERE starts_with(a.application_name, %(prefix)s)
  AND (%(marker)s::text IS NULL OR strpos(a.query, %(marker)s::text) > 0)
  AND %(gate_pid)s::int = ANY (pg_blocking_pids(a.pid))
GROUP BY a.application_name;

-- name: bench_group_backends
-- The server backends of one process group's sessions, for their CPU time (cpu.py).
SELECT pid FROM pg_stat_activity WHERE starts_with(application_name, %(prefix)s);

-- name: peer_pgqueuer_reset
-- Each peer drain starts from empty tables, as Tenure's starts from a vacuumed empty queue.
TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics;

-- name: peer_procrastinate_reset
TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, procrastinate_workers;

-- name: bench_raw_insert
-- The end-to-end baseline's enqueue: one plain row, nothing checked, no notification (the raw
-- loop polls).
INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts)
VALUES (%(queue)s, 'noop', '{}'::jsonb, 0, statement_timestamp(), 'pending', 20);

-- name: bench_succeeded
SELECT count(*) AS n FROM __schema__.jobs WHERE state = 'succeeded';

-- name: bench_clock
SELECT clock_timestamp() AS now;

-- name: bench_finished_at
-- When the job finished that is %(k)s-th (from 0) in finishing order: the half rates (drain.py).
SELECT finished_at AS at FROM __schema__.jobs WHERE state = 'succeeded'
ORDER BY finished_at OFFSET %(k)s LIMIT 1;

-- name: peer_pgqueuer_state
-- Polled throughout a drain, so index probes only: a count's cost grows with the table.
SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'picked') AS started,
       (SELECT id FROM pgqueuer ORDER BY id LIMIT 1) IS NOT NULL AS unfinished;

-- name: peer_pgqueuer_finished_at
SELECT created AS at FROM pgqueuer_log WHERE status = 'successful'
ORDER BY created OFFSET %(k)s LIMIT 1;

-- name: peer_procrastinate_state
SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('doing', 'succeeded')) AS started,
       EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing')) AS unfinished;

-- name: peer_procrastinate_finished_at
SELECT at FROM procrastinate_events WHERE type = 'succeeded' ORDER BY at OFFSET %(k)s LIMIT 1;

-- name: peer_pgqueuer_succeeded
-- PgQueuer logs each finished job; a drained one is logged successful.
SELECT count(*) AS n FROM pgqueuer_log WHERE status = 'successful';

-- name: peer_procrastinate_succeeded
SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded';

-- name: bench_floor_insert
-- The latency floor's enqueue: one plain row, committed durably on its own.
INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts)
VALUES (%(queue)s, 'noop', '{}'::jsonb, 0, statement_timestamp(), 'pending', 20)
RETURNING id;

-- name: bench_floor_listen
LISTEN tenure_bench_floor;

-- name: bench_floor_async_commit
-- The floor's notifying session: a notification carries nothing to keep, so its commit need not
-- wait for a WAL flush (Tenure's own wake-ups are committed the same way).
SET synchronous_commit = off;

-- name: bench_floor_notify
SELECT pg_notify('tenure_bench_floor', %(id)s::text);

-- name: bench_floor_claim
-- The floor's claim: the row the notification named, leased and committed durably.
UPDATE __schema__.jobs j
__part_raw_lease__
WHERE j.id = %(id)s AND j.state = 'pending'
RETURNING j.id, j.lease_token;

-- name: bench_other_sessions
-- Sessions on this database besides the caller's: each flushes its statistics when it exits.
SELECT count(*) AS n
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid();

-- name: bench_table_writes
-- Row writes to one table so far; an update is HOT when its new version needed no index entry.
SELECT n_tup_ins AS inserts, n_tup_upd AS updates, n_tup_hot_upd AS hot_updates
FROM pg_stat_user_tables
WHERE relid = %(table)s::regclass;

-- name: bench_flush_own_stats
-- This session's own counters (its reads count as commits) reach the shared statistics at the
-- end of this statement, not lazily during the drain that follows.
SELECT pg_stat_force_next_flush();

-- name: bench_table_indexes
-- The indexes on one table, and how many of them are partial (entered only by the row versions
-- their predicate admits).
SELECT count(*) AS indexes, count(*) FILTER (WHERE indpred IS NOT NULL) AS partial_indexes
FROM pg_index
WHERE indrelid = %(table)s::regclass;

-- name: bench_index_admits_function
-- Whether an index's predicate admits one job's row as it is now (NULL predicate: a non-partial
-- index, which holds every version), the catalog's own text of the predicate evaluated on the
-- row. In this session's temporary schema, gone with it. One line: the loader keeps no string
-- across lines.
CREATE FUNCTION pg_temp.bench_index_admits(predicate text, job_id bigint) RETURNS boolean LANGUAGE plpgsql AS 'DECLARE admits boolean; BEGIN IF predicate IS NULL THEN RETURN true; END IF; EXECUTE ''SELECT ('' || predicate || '') FROM __schema__.jobs WHERE id = $1'' INTO admits USING job_id; RETURN coalesce(admits, false); END';

-- name: bench_indexes_admitting
-- Each index of the jobs table, and whether the job's current row version is in it.
SELECT c.relname AS name,
       pg_temp.bench_index_admits(pg_get_expr(i.indpred, i.indrelid), %(id)s) AS admits
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = '__schema__.jobs'::regclass
ORDER BY c.relname;

-- name: bench_xact_hot_updates
-- The HOT updates of jobs in this transaction so far.
SELECT n_tup_hot_upd AS hot
FROM pg_stat_xact_user_tables
WHERE relid = '__schema__.jobs'::regclass;

-- name: bench_sample_insert
-- One no-op job as the drain's load stores it (the columns' defaults for everything else).
INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts)
VALUES (%(queue)s, 'noop', '{}'::jsonb, 0, statement_timestamp(), 'pending', 20)
RETURNING id;

-- name: bench_index_reads
-- The index tuples each index of the jobs table has given to scans so far.
SELECT indexrelname AS name, idx_tup_read AS tuples_read
FROM pg_stat_user_indexes
WHERE relid = '__schema__.jobs'::regclass;
