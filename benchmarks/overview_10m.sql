-- The statements of benchmarks/overview_10m.py: a database of 10M finished jobs, made and
-- dropped by the benchmark.

-- name: database_drop
DROP DATABASE IF EXISTS tenure_overview_bench WITH (FORCE);

-- name: database_create
CREATE DATABASE tenure_overview_bench;

-- name: fill_settings
-- A bulk fill of a throwaway database: nothing to wait for on commit, room to build in memory.
SET synchronous_commit = off;
SET maintenance_work_mem = '512MB';

-- name: fill_finished
-- N finished jobs in one statement: 95% succeeded, 3% cancelled, 2% dead, over five
-- queues, finished evenly over the last 30 days. Their idempotency keys follow their ids, so the
-- unique index fills in order (random keys would cost the fill, not the overview).
INSERT INTO tenure.jobs (queue, task, payload, state, attempt_count, lease_token, created_at,
                         attempted_at, finished_at, last_error_code, last_error, idempotency_key)
SELECT 'q' || (i %% 5), 't' || (i %% 20), jsonb_build_object('n', i), s.state::tenure.job_state,
       1, 1, f.at - interval '2 seconds', f.at - interval '1 second', f.at,
       CASE WHEN s.state = 'dead' THEN 'E' || (i %% 7) END,
       CASE WHEN s.state = 'dead' THEN 'it failed' END,
       lpad(to_hex(i), 32, '0')::uuid
FROM generate_series(1, %(jobs)s) i
CROSS JOIN LATERAL (SELECT CASE WHEN i %% 100 < 95 THEN 'succeeded'
                                WHEN i %% 100 < 98 THEN 'cancelled'
                                ELSE 'dead' END AS state) s
CROSS JOIN LATERAL (SELECT now() - (i %% 2592000) * interval '1 second' AS at) f;

-- name: fill_waiting
INSERT INTO tenure.jobs (queue, task)
SELECT 'q' || (i % 5), 't' || (i % 20) FROM generate_series(1, 1000) i;

-- name: fill_running
UPDATE tenure.jobs SET state = 'running', lease_owner = 'bench-worker', lease_token = 1,
       attempt_count = 1, attempted_at = now(), lease_expires_at = now() + interval '1 hour',
       lease_deadline = now() + interval '2 hours'
WHERE id IN (SELECT id FROM tenure.jobs WHERE state = 'pending' ORDER BY id LIMIT 20);

-- name: vacuum
VACUUM ANALYZE tenure.jobs;
