-- The soak's faults and its final accounting. __schema__ is the (quoted) Tenure schema.

-- name: soak_terminate_worker
-- Kills every server session of one worker (its application_name is its worker id).
SELECT count(pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE application_name = %(owner)s AND pid <> pg_backend_pid();

-- name: soak_snapshot_open
-- Run inside a REPEATABLE READ transaction: takes the snapshot that is then held open.
SELECT count(*) AS jobs, txid_current() AS xid FROM __schema__.jobs;

-- name: soak_progress
-- The rows a fault injected (task %(injected)s) are not the workload's: one of them is due only
-- in the year 8999, and their own check judges them.
SELECT count(*) AS stored,
       count(*) FILTER (WHERE state IN ('scheduled', 'pending', 'running') AND task <> %(injected)s)
           AS unfinished,
       count(*) FILTER (WHERE state = 'running') AS running,
       (SELECT count(*) FROM __schema__.job_events WHERE event = 'lease_expired') AS expired,
       (SELECT count(*) FROM __schema__.job_events WHERE event = 'fencing_lost') AS fenced
FROM __schema__.jobs;

-- name: soak_leases_outstanding
-- Running jobs and how long until the last of their leases runs out, in database time.
SELECT count(*) AS running,
       greatest(0, extract(epoch FROM max(lease_expires_at) - statement_timestamp()))::float8
           AS seconds_left
FROM __schema__.jobs
WHERE state = 'running';

-- name: soak_outcomes
-- The workload's jobs (not the rows a fault injected) by how they ended.
SELECT task, state::text AS state, coalesce(last_error_code, '') AS code, count(*) AS jobs
FROM __schema__.jobs
WHERE task <> %(injected)s
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: soak_handed
-- The workload's jobs whose last attempt was the one a worker's offer gave them in their enqueue
-- (docs/hand-off.md): a claim runs after the insert's statement, a hand-off in it, so only a
-- handed attempt began at the job's creation. (A handed job retried since counts no more.)
SELECT count(*) AS jobs
FROM __schema__.jobs
WHERE task <> %(injected)s AND attempted_at = created_at;

-- name: soak_missing
-- Acknowledged enqueues whose job is not stored: a lost job.
SELECT acked.id
FROM unnest(%(ids)s::bigint[]) AS acked(id)
WHERE NOT EXISTS (SELECT 1 FROM __schema__.jobs j WHERE j.id = acked.id)
ORDER BY acked.id;

-- name: soak_events
SELECT event, coalesce(error_code, '') AS code, count(*) AS n
FROM __schema__.job_events
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: soak_error_codes
-- Error codes written anywhere in the history: MAX_RUNTIME must never appear (no soak job runs
-- anywhere near its max runtime), whatever the handlers raise themselves.
SELECT coalesce(error_code, '') AS code, count(*) AS n
FROM __schema__.job_events
GROUP BY 1;

-- name: soak_account_reopen
-- Inside a transfer's own transaction: opens an account that already exists, which the primary
-- key refuses. The refused-transfer job turns that into Permanent from inside a savepoint.
INSERT INTO bank.accounts (id, opening_balance, balance) VALUES (%(id)s, 0, 0);

-- name: soak_lock_running_jobs
-- A foreign session (an operator's SELECT ... FOR UPDATE) takes the row locks of running jobs
-- and holds them while its transaction stays open.
SELECT id FROM __schema__.jobs
WHERE state = 'running'
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: soak_terminate_workers
-- Ends every session of the soak's workers (their application_name is their worker id), as a
-- failover does: they reconnect and get the database as it now is.
SELECT count(pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE %(prefix)s AND pid <> pg_backend_pid();

-- name: soak_running_sample
-- Running jobs an operator picks to revoke, oldest claims first.
SELECT id, task FROM __schema__.jobs
WHERE state = 'running'
ORDER BY attempted_at
LIMIT %(limit)s;

-- name: soak_claims_since
-- Claims of a queue whose statement began after %(since)s: while the queue is paused, none.
SELECT count(*) AS claims
FROM __schema__.jobs
WHERE queue = %(queue)s AND attempted_at > %(since)s;

-- name: soak_snooze_results
-- The snoozing kinds' jobs that succeeded: how often they snoozed, on which attempt, and the
-- result they stored.
SELECT id, snoozes, attempt_count, result
FROM __schema__.jobs
WHERE task = ANY(%(tasks)s::text[]) AND state = 'succeeded'
ORDER BY id;

-- name: soak_wait_results
-- The waiting kinds' jobs: their state and result, the signals sent to their key (one: a second
-- send with the same idempotency key writes nothing) and the signals delivered to each.
SELECT j.id, j.state::text AS state, j.payload ->> 'signal' AS key, j.result,
       (SELECT count(*) FROM __schema__.signals s WHERE s.key = j.payload ->> 'signal') AS signals,
       (SELECT count(*) FROM __schema__.signals s WHERE s.job_id = j.id) AS delivered,
       (SELECT count(*) FROM __schema__.job_waits w WHERE w.job_id = j.id AND w.state = 'signalled') AS signalled
FROM __schema__.jobs j
WHERE j.task = ANY(%(tasks)s::text[])
ORDER BY j.id;

-- name: soak_limited_live
-- Live leases of the limited queue, sampled throughout the soak.
SELECT count(*) AS live
FROM __schema__.jobs
WHERE queue = %(queue)s AND state = 'running' AND lease_expires_at > statement_timestamp();

-- name: soak_schedule_fires
-- The soak's schedule: slots fired, distinct slots, the seconds they span, and their jobs'
-- states. Every second from the first slot to the last must have fired exactly once.
SELECT count(*) AS fires, count(DISTINCT f.slot) AS slots,
       coalesce(extract(epoch FROM max(f.slot) - min(f.slot))::bigint + 1, 0) AS span,
       count(*) FILTER (WHERE j.state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE j.id IS NULL) AS no_job
FROM __schema__.schedule_fires f
LEFT JOIN __schema__.jobs j ON j.id = f.job_id
WHERE f.schedule = %(schedule)s;

-- name: soak_any_succeeded
-- Whether any job has succeeded yet: the upgrade waits for the load to be flowing.
SELECT EXISTS (SELECT 1 FROM __schema__.jobs WHERE state = 'succeeded') AS flowing;

-- name: soak_completions_between
-- When jobs succeeded in a window: the soak reads how long work stopped around a server fault.
SELECT finished_at FROM __schema__.jobs
WHERE state = 'succeeded' AND finished_at BETWEEN %(since)s AND %(until)s
ORDER BY finished_at;

-- name: soak_lock_pending_limited
-- A foreign session takes the row locks of the limited queue's next jobs, in the order its claim
-- would take them, and holds them while its transaction stays open.
SELECT id FROM __schema__.jobs
WHERE state = 'pending' AND queue = %(queue)s
ORDER BY priority DESC, available_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: soak_lock_pending_keyed
-- The same for the first waiting job of one ordering key: the head of its key, or the next job
-- if the head was claimed already.
SELECT id FROM __schema__.jobs
WHERE state = 'pending' AND ordering_key = %(key)s
ORDER BY id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: soak_hold_window
-- Inside the locking transaction: when the hold began (its transaction's start) and now, in
-- database time, and the jobs besides the held ones that were claimed and succeeded meanwhile,
-- by queue. Claimed since: jobs already running when the hold began would finish even if every
-- claim were stuck behind the held rows.
SELECT now() AS began, clock_timestamp() AS ended,
       count(j.id) FILTER (WHERE j.queue = %(limited)s) AS limited,
       count(j.id) FILTER (WHERE j.queue <> %(limited)s) AS elsewhere,
       count(j.id) FILTER (WHERE j.ordering_key IS NOT NULL) AS ordered
FROM (SELECT 1) one
LEFT JOIN __schema__.jobs j
    ON j.state = 'succeeded' AND j.attempted_at >= now() AND NOT (j.id = ANY(%(held)s::bigint[]));

-- name: soak_terminate_orm
-- Kills the thread handlers' own connections (an ORM's, one per thread), found by the
-- application_name they set: their worker's id and a suffix.
SELECT count(pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE %(prefix)s
  AND right(application_name, char_length(%(suffix)s)) = %(suffix)s AND pid <> pg_backend_pid();

-- name: soak_enqueue_worst
-- As the producer role, through the one way in it has: a job with the largest values the
-- database still accepts.
SELECT id, existing, scheduled
FROM __schema__.enqueue(%(task)s, %(payload)s::jsonb, queue => %(queue)s, run_at => %(run_at)s::timestamptz,
                        priority => 32767, max_attempts => 1000, unique_key => %(unique_key)s);

-- name: soak_insert_unreadable
-- As the admin, past every client check: a payload nested deeper than Python can decode.
INSERT INTO __schema__.jobs (queue, task, payload)
VALUES (%(queue)s, %(task)s, ('{"deep": ' || repeat('[', %(depth)s) || repeat(']', %(depth)s) || '}')::jsonb)
RETURNING id;

-- name: soak_injected
-- The rows a fault injected, as they ended. The payload is left out: one of them cannot be read.
SELECT id, state::text AS state, coalesce(last_error_code, '') AS code, priority, max_attempts,
       extract(year FROM available_at AT TIME ZONE 'UTC')::int AS run_year,
       char_length(unique_key) AS key_length
FROM __schema__.jobs
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id;

-- name: soak_acts_recorded
-- The audit records of acts on one job and on one queue: a refused request adds none.
SELECT (SELECT count(*) FROM __schema__.job_events
        WHERE job_id = %(job)s AND event IN ('cancel', 'revoke')) AS job_acts,
       (SELECT state::text FROM __schema__.jobs WHERE id = %(job)s) AS job_state,
       (SELECT count(*) FROM __schema__.queue_events WHERE queue = %(queue)s) AS queue_acts,
       EXISTS (SELECT 1 FROM __schema__.queue_pauses WHERE queue = %(queue)s) AS paused;

-- name: soak_account_balance
-- An ORM-style read from a thread handler's own connection.
SELECT balance FROM bank.accounts WHERE id = %(id)s;

-- name: soak_task_retries
-- One task's jobs: how many, how many succeeded, and how many of their attempts failed and were
-- retried.
SELECT count(*) AS jobs,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       (SELECT count(*) FROM __schema__.job_events e JOIN __schema__.jobs t ON t.id = e.job_id
        WHERE t.task = %(task)s AND e.event = 'retry') AS retried
FROM __schema__.jobs
WHERE task = %(task)s;

-- name: soak_vacuums
-- Vacuums of `jobs` run by a session (the workers'; the soak runs none) and by autovacuum.
SELECT pg_stat_get_vacuum_count('__schema__.jobs'::regclass) AS by_workers,
       pg_stat_get_autovacuum_count('__schema__.jobs'::regclass) AS by_autovacuum;
