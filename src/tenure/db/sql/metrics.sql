-- Gauges for metrics, `tenure status` and `tenure check`. Read them together inside one
-- REPEATABLE READ, READ ONLY transaction so one report is one consistent snapshot.
-- Job gauges read only scheduled, pending, running and dead rows through their partial indexes:
-- a scrape costs the backlog, never the history of succeeded jobs.

-- name: gauge_queues
-- Per queue: jobs waiting for a later run time, backlog, oldest claimable job, running leases
-- close to expiry, dead jobs and the oldest unresolved dead one (reprocessed or purged jobs are
-- no longer dead).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), scheduled AS (
    SELECT queue, count(*) AS n
    FROM __schema__.jobs
    WHERE state = 'scheduled'
    GROUP BY queue
), pending AS (
    SELECT queue, count(*) AS n,
           min(available_at) FILTER (WHERE available_at <= (SELECT now FROM clock)) AS oldest_claimable_at
    FROM __schema__.jobs
    WHERE state = 'pending'
    GROUP BY queue
), running AS (
    SELECT queue, count(*) AS n,
           count(*) FILTER (WHERE lease_expires_at
                            <= (SELECT now FROM clock) + make_interval(secs => %(near_expiry_seconds)s))
               AS near_expiry
    FROM __schema__.jobs
    WHERE state = 'running'
    GROUP BY queue
), dead AS (
    SELECT queue, count(*) AS n, min(finished_at) AS oldest_dead_at
    FROM __schema__.jobs
    WHERE state = 'dead'
    GROUP BY queue
), queues AS (
    SELECT queue FROM scheduled UNION SELECT queue FROM pending UNION SELECT queue FROM running
    UNION SELECT queue FROM dead
)
SELECT q.queue,
       coalesce(s.n, 0) AS scheduled,
       coalesce(p.n, 0) AS pending,
       p.oldest_claimable_at,
       coalesce(r.n, 0) AS running,
       coalesce(r.near_expiry, 0) AS leases_near_expiry,
       coalesce(d.n, 0) AS dead,
       d.oldest_dead_at,
       clock.now AS db_now
FROM queues q
LEFT JOIN scheduled s USING (queue)
LEFT JOIN pending p USING (queue)
LEFT JOIN running r USING (queue)
LEFT JOIN dead d USING (queue)
CROSS JOIN clock
ORDER BY q.queue;

-- name: gauge_finished_recent
-- Jobs that reached a terminal state in each of the last %(minutes)s minutes, per queue
-- (minute 0 is the current one): throughput as the database saw it, from every worker. Read
-- through the finished jobs' partial indexes (jobs_finished_idx for succeeded and cancelled,
-- jobs_dead_idx for dead), one arm each, so the cost is the window's jobs however long the
-- history of finished jobs is; one IN over all three states matches neither index and scans the
-- table. The window is written into each arm, not read from a CTE, so that the planner can
-- estimate it (a CTE's value it cannot, and its guess of a third of the table brought JIT in).
WITH finished AS (
    SELECT queue, state, finished_at
    FROM __schema__.jobs
    WHERE state IN ('succeeded', 'cancelled')
      AND finished_at > coalesce(%(now)s::timestamptz, now()) - make_interval(mins => %(minutes)s)
      AND finished_at <= coalesce(%(now)s::timestamptz, now())
    UNION ALL
    SELECT queue, state, finished_at
    FROM __schema__.jobs
    WHERE state = 'dead'
      AND finished_at > coalesce(%(now)s::timestamptz, now()) - make_interval(mins => %(minutes)s)
      AND finished_at <= coalesce(%(now)s::timestamptz, now())
)
SELECT queue, state::text AS state,
       floor(extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - finished_at) / 60)::integer
           AS minutes_ago,
       count(*) AS jobs
FROM finished
GROUP BY queue, state, minutes_ago
ORDER BY queue, state, minutes_ago;

-- name: gauge_workers
-- Registered workers, the stale ones among them (not seen for %(stale_seconds)s), their slots,
-- and the distinct lease owners of running jobs (which counts workers that never registered).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT count(w.id) AS registered,
       count(w.id) FILTER (WHERE w.seen_at < clock.now - make_interval(secs => %(stale_seconds)s)) AS stale,
       coalesce(sum(w.busy), 0)::bigint AS busy,
       coalesce(sum(w.concurrency), 0)::bigint AS capacity,
       (SELECT count(DISTINCT lease_owner) FROM __schema__.jobs WHERE state = 'running') AS lease_owners,
       count(w.id) FILTER (WHERE w.failing IS NOT NULL) AS failing,
       clock.now AS db_now
FROM clock
LEFT JOIN __schema__.workers w ON true
GROUP BY clock.now;

-- name: worker_list
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT id, queues, concurrency, busy, started_at, seen_at, failing,
       extract(epoch FROM clock.now - seen_at)::float8 AS silent_seconds
FROM __schema__.workers CROSS JOIN clock
ORDER BY id;

-- name: gauge_connections
-- Sessions on this database opened by Tenure (application_name tenure*), by state.
SELECT application_name AS application, coalesce(state, 'unknown') AS state, count(*) AS connections
FROM pg_stat_activity
WHERE datname = current_database()
  AND application_name LIKE 'tenure%%'
GROUP BY application_name, state
ORDER BY application_name, state;

-- name: gauge_lock_waits
-- Sessions on this database waiting for a lock now, and the longest wait. Row locks show up as
-- waits on another transaction's id, not on a table, so this counts every lock wait here.
SELECT count(*) AS waiting,
       coalesce(max(extract(epoch FROM clock_timestamp() - a.state_change)), 0)::float8 AS longest_seconds
FROM pg_stat_activity a
WHERE a.datname = current_database()
  AND a.wait_event_type = 'Lock';

-- name: gauge_paused
-- Queues paused now, and for how long.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT p.queue, extract(epoch FROM clock.now - p.paused_at)::float8 AS paused_seconds, p.until
FROM __schema__.queue_pauses p CROSS JOIN clock
WHERE p.until IS NULL OR p.until > clock.now
ORDER BY p.queue;

-- name: gauge_control_recent
-- Operators' and handlers' control acts of the last %(control_window_seconds)s seconds, by queue:
-- cancels, revokes, snoozes and retries-now, from the audit log's time index.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT j.queue, e.event, count(*) AS n
FROM __schema__.job_events e
JOIN __schema__.jobs j ON j.id = e.job_id
CROSS JOIN clock
WHERE e.at > clock.now - make_interval(secs => %(control_window_seconds)s)
  AND e.event IN ('cancel', 'revoke', 'snooze', 'retry_now')
GROUP BY j.queue, e.event
ORDER BY j.queue, e.event;

-- name: gauge_schedules
-- Every registered schedule: paused or not, whether a worker declared it in the last
-- %(stale_seconds)s seconds, and seconds since its last fired slot (NULL: it never fired).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT s.name, s.paused, s.declared_at > clock.now - make_interval(secs => %(stale_seconds)s) AS declared,
       extract(epoch FROM clock.now - s.last_fired_slot)::float8 AS since_last_fire_seconds
FROM __schema__.schedules s CROSS JOIN clock
ORDER BY s.name;

-- name: gauge_jobs_without_worker
-- Due jobs that no live worker can run, per task and queue: no worker seen in the last
-- %(stale_seconds)s seconds both serves the job's queue and registered its task (a typo'd task
-- name, a task registered by a script run directly, `__main__.f`, or workers not started).
-- `registered` says whether a live worker registered the task at all (serving other queues). A
-- worker whose row lists no tasks (a version before migration 0021) counts as running every task
-- of its queues.
-- Bounded whatever the backlog, and through the claim's own indexes (no index of its own, which
-- every enqueue would pay for): a skip scan takes the queues with due jobs, one index descent
-- each, and reads the oldest %(count_limit)s due jobs of each queue. A job no worker can claim
-- stays among its queue's oldest while the others drain past it, so that is where it is found.
-- Of the pairs no live worker runs, the first %(pairs_limit)s by name are reported
-- (`stranded_pairs` counts them all), each with its jobs among those read.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), live AS MATERIALIZED (
    SELECT w.queues, w.tasks
    FROM __schema__.workers w CROSS JOIN clock
    WHERE w.seen_at >= clock.now - make_interval(secs => %(stale_seconds)s)
), queues AS (
    (SELECT j.queue
     FROM __schema__.jobs j
     WHERE j.state = 'pending'
     ORDER BY j.queue
     LIMIT 1)
    UNION ALL
    SELECT later.queue
    FROM queues q
    CROSS JOIN LATERAL (
        SELECT j.queue
        FROM __schema__.jobs j
        WHERE j.state = 'pending' AND j.queue > q.queue
        ORDER BY j.queue
        LIMIT 1
    ) later
), oldest AS (
    SELECT o.task, o.queue
    FROM queues q
    CROSS JOIN LATERAL (
        SELECT j.task, j.queue
        FROM __schema__.jobs j
        WHERE j.state = 'pending' AND j.queue = q.queue
        ORDER BY j.available_at, j.id
        LIMIT %(count_limit)s
    ) o
), stranded AS (
    SELECT o.task, o.queue, count(*) AS jobs, count(*) OVER () AS stranded_pairs
    FROM oldest o
    WHERE NOT EXISTS (
        SELECT 1 FROM live w
        WHERE o.queue = ANY (w.queues) AND (w.tasks IS NULL OR o.task = ANY (w.tasks))
    )
    GROUP BY o.task, o.queue
    ORDER BY o.task, o.queue
    LIMIT %(pairs_limit)s
)
SELECT s.task, s.queue, s.jobs,
       EXISTS (SELECT 1 FROM live w WHERE w.tasks IS NULL OR s.task = ANY (w.tasks)) AS registered,
       s.stranded_pairs
FROM stranded s
ORDER BY s.task, s.queue;

-- name: snapshot_begin
-- First statement of a report's transaction: every gauge after it sees the same snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;
