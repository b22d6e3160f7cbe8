-- Retention and the worker registry. Every delete takes a bounded batch with SKIP LOCKED, so
-- any number of processes may run the maintenance pass at once without waiting on each other.

-- name: worker_seen
-- A worker's periodic "still here", with how many of its slots are busy and which of its
-- services are failing (NULL when none is).
INSERT INTO __schema__.workers AS w (id, queues, concurrency, busy, started_at, seen_at, failing)
VALUES (%(id)s, %(queues)s::text[], %(concurrency)s, %(busy)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()), %(failing)s::jsonb)
ON CONFLICT (id) DO UPDATE
SET queues = excluded.queues, concurrency = excluded.concurrency, busy = excluded.busy,
    seen_at = excluded.seen_at, failing = excluded.failing
RETURNING (xmax = 0) AS inserted;

-- name: worker_tasks_record
-- The tasks a worker registered, written when its row is created rather than at every refresh
-- (a long list would be a new out-of-line value every few seconds): what the jobs-without-worker
-- gauge matches waiting jobs against.
UPDATE __schema__.workers SET tasks = %(tasks)s::text[] WHERE id = %(id)s;

-- name: worker_forget
DELETE FROM __schema__.workers WHERE id = %(id)s;

-- name: workers_prune_silent
-- Rows of workers silent for longer than %(seconds)s: they crashed long ago.
DELETE FROM __schema__.workers
WHERE seen_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
RETURNING id;

-- part: doomed_deleted
-- The end of every retention statement whose doomed CTE chose and locked finished jobs (their id
-- and state): each is deleted with its history, provided it is still in the state it was chosen
-- in; returns its id and queue.
history AS (
    DELETE FROM __schema__.job_events e USING doomed d WHERE e.job_id = d.id
)
DELETE FROM __schema__.jobs j
USING doomed d
WHERE j.id = d.id
  AND j.state = d.state
RETURNING j.id, j.queue

-- name: jobs_prune_finished
-- Succeeded and cancelled jobs (only those: never scheduled, pending, running or dead) finished longer ago
-- than their queue's retention, oldest first, with their audit rows.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), policy AS (
    SELECT * FROM unnest(%(policy_queues)s::text[], %(policy_seconds)s::float8[]) AS p(queue, seconds)
), doomed AS (
    SELECT j.id, j.state
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE j.state IN ('succeeded', 'cancelled')
      AND j.finished_at < clock.now - make_interval(secs => %(shortest_seconds)s)
      AND j.finished_at < clock.now - make_interval(secs => coalesce(
              (SELECT p.seconds FROM policy p WHERE p.queue = j.queue), %(default_seconds)s::float8))
    ORDER BY j.finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), __part_doomed_deleted__;

-- name: workflows_prune_finished
-- Workflows whose every step succeeded or was cancelled, the last of them longer ago than
-- %(seconds)s, oldest first; their steps and dependencies go with them (ON DELETE CASCADE).
-- Workflows with a dead, held or unfinished step stay, as dead jobs do. The steps' own jobs are
-- pruned as jobs.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), doomed AS (
    SELECT w.id
    FROM __schema__.workflows w CROSS JOIN clock
    WHERE w.created_at < clock.now - make_interval(secs => %(seconds)s)
      AND NOT EXISTS (
          SELECT 1 FROM __schema__.workflow_steps s
          WHERE s.workflow_id = w.id
            AND (s.state NOT IN ('succeeded', 'cancelled')
                 OR s.finished_at >= clock.now - make_interval(secs => %(seconds)s))
      )
    ORDER BY w.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM __schema__.workflows w USING doomed d WHERE w.id = d.id
RETURNING w.id;

-- name: job_events_prune
-- Audit rows older than the retention, except those of jobs that are scheduled, pending, running
-- or dead: a job still in play keeps its whole history.
WITH doomed AS (
    SELECT e.id
    FROM __schema__.job_events e
    WHERE e.at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
      AND NOT EXISTS (
          SELECT 1 FROM __schema__.jobs j
          WHERE j.id = e.job_id AND j.state NOT IN ('succeeded', 'cancelled')
      )
    ORDER BY e.at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM __schema__.job_events e USING doomed d WHERE e.id = d.id
RETURNING e.id;

-- name: jobs_vacuum_due
-- Whether `jobs` holds more dead row versions than autovacuum's trigger for it (the table's own
-- storage parameters, else the server's: threshold + scale factor x live rows), how many, and
-- whether this role may vacuum it (its owner; from PostgreSQL 17, MAINTAIN). A claim walks past
-- every dead entry at the front of the claimable indexes, so a queue draining thousands of jobs
-- a second cannot wait for autovacuum's next round (a minute apart, cost-delayed).
SELECT pg_stat_get_dead_tuples(c.oid) AS dead_rows,
       pg_stat_get_dead_tuples(c.oid) > coalesce(o.threshold, current_setting('autovacuum_vacuum_threshold')::float8)
           + coalesce(o.scale, current_setting('autovacuum_vacuum_scale_factor')::float8)
             * pg_stat_get_live_tuples(c.oid) AS due,
       CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN')
            ELSE pg_has_role(c.relowner, 'USAGE')
       END AS may_vacuum
FROM pg_class c
CROSS JOIN LATERAL (
    SELECT max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_threshold')::float8 AS threshold,
           max(option_value) FILTER (WHERE option_name = 'autovacuum_vacuum_scale_factor')::float8 AS scale
    FROM pg_options_to_table(c.reloptions)
) o
WHERE c.oid = '__schema__.jobs'::regclass;

-- name: jobs_vacuum
-- Outside any transaction. SKIP_LOCKED: a vacuum already under way (autovacuum's, another
-- worker's) is left to finish instead of waited for. TRUNCATE false: giving the table's empty
-- tail back to the file system takes an exclusive lock that every claim would queue behind.
VACUUM (SKIP_LOCKED, TRUNCATE false) __schema__.jobs;
