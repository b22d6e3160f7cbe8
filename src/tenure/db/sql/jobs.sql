-- Producer-side and operator-side queries on jobs.
-- Every query that depends on time takes %(now)s: NULL means the database clock.

-- name: job_insert_many
-- Inserts the jobs of %(jobs)s, a JSON array with one object per job, and, when %(notify)s,
-- notifies each affected queue once. One JSON text is the cheapest way for the client to
-- send a job: fourteen typed arrays cost it twice the CPU to encode, for one job or a hundred.
-- A job whose run time is later than the database's now is `scheduled`, outside the claim
-- indexes: instead of its queue, the notification tells promoters the earliest such run time
-- (payload: the prefix %(scheduled_prefix)s and epoch seconds; no queue name starts with it).
-- Without %(notify)s the caller owns the commit and notifies after it (queue_notify, with
-- after_commit): each row says whether it went in scheduled, so the caller knows what to say.
-- Keyed jobs first take a transaction-scoped advisory lock per ordering key, in key order
-- (no deadlock between batches), so the ids of one key are drawn in commit order.
-- The idempotency keys come from the client, which therefore knows them without reading them
-- back: the producer role may insert these columns but read only id and available_at. Ids are
-- drawn in input order (the ORDER BY feeds the insert), so the rows come back in that order.
-- A job that would share its idempotency key with a stored job, or its unique key (with
-- its period's window number appended) with a job holding that key, is not inserted (ON
-- CONFLICT DO NOTHING). Jobs that can meet such a key (unique, or with the caller's own
-- idempotency key) are therefore sent one to a statement, and job_find_holder names the job
-- that kept one out; a batch of other jobs cannot conflict, so its rows pair with its input.
WITH input AS (
    SELECT j->>'queue' AS queue, j->>'task' AS task, j->'payload' AS payload,
           (j->>'priority')::smallint AS priority, (j->>'run_at')::timestamptz AS run_at,
           (j->>'delay')::float8 AS delay, (j->>'max_attempts')::integer AS max_attempts,
           j->>'ordering_key' AS ordering_key, (j->>'idempotency_key')::uuid AS idempotency_key,
           (j->>'result_wanted')::boolean AS result_wanted, j->>'unique_key' AS unique_key,
           j->>'unique_states' AS unique_states, (j->>'unique_period')::float8 AS unique_period,
           j->'trace_context' AS trace_context, ord
    FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS e(j, ord)
), clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), timed AS (
    SELECT i.*, coalesce(i.run_at, clock.now + make_interval(secs => coalesce(i.delay, 0))) AS at,
           clock.now,
           CASE WHEN i.unique_period IS NULL THEN i.unique_key
                ELSE i.unique_key || '@' || floor(extract(epoch FROM clock.now) / i.unique_period)::bigint
           END AS held_key
    FROM input i CROSS JOIN clock
), ordering_locks AS (
    SELECT count(pg_advisory_xact_lock(hashtext(%(ordering_lock_space)s), hashtext(k.ordering_key))) AS n
    FROM (SELECT DISTINCT ordering_key FROM input WHERE ordering_key IS NOT NULL ORDER BY 1) k
), inserted AS (
    INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts,
                                 created_at, ordering_key, idempotency_key, result_wanted, unique_key,
                                 unique_states, trace_context)
    SELECT t.queue, t.task, t.payload, t.priority, t.at,
           CASE WHEN t.at > t.now THEN 'scheduled' ELSE 'pending' END::__schema__.job_state,
           t.max_attempts, t.now, t.ordering_key, t.idempotency_key, t.result_wanted, t.held_key,
           t.unique_states::__schema__.job_state[], t.trace_context
    FROM timed t CROSS JOIN ordering_locks
    ORDER BY t.ord
    ON CONFLICT DO NOTHING
    RETURNING id, available_at
), notified AS (
    SELECT count(pg_notify(%(channel)s, w.payload)) AS n
    FROM (SELECT DISTINCT t.queue AS payload FROM timed t WHERE t.at <= t.now
          UNION ALL
          SELECT %(scheduled_prefix)s || extract(epoch FROM min(t.at))::text
          FROM timed t WHERE t.at > t.now HAVING count(*) > 0) w
    WHERE %(notify)s::boolean
)
SELECT inserted.id, inserted.available_at, inserted.available_at > clock.now AS scheduled
FROM inserted CROSS JOIN notified CROSS JOIN clock
ORDER BY inserted.id;

-- name: job_insert_one
-- One job without keys (no ordering key, unique key or caller's idempotency key): the usual
-- enqueue, a job per transaction. The same row as job_insert_many's, from scalar parameters:
-- no JSON document to take apart, no ordering locks or conflict arbiters, nothing to sort, so
-- the server spends a fifth to a third less on it (docs/performance.md, third round). Notifies as
-- job_insert_many does when %(notify)s, else says whether the job went in scheduled.
-- One INSERT with no CTE: each CTE and its scan is a plan node more for the server to set up and
-- tear down at every run, which an idle queue's enqueue pays on its way to a worker (0.02-0.03 ms
-- of server CPU, docs/performance.md, twenty-first round). The clock's expression is written at
-- each use: now() is the transaction's time, the same value at each. The notification goes out
-- from the returned row, so it names the run time the row holds.
INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts,
                             created_at, idempotency_key, result_wanted, trace_context)
VALUES (%(queue)s::text, %(task)s::text, %(payload)s::jsonb, %(priority)s::smallint,
        coalesce(%(run_at)s::timestamptz,
                 coalesce(%(now)s::timestamptz, now()) + make_interval(secs => coalesce(%(delay)s::float8, 0))),
        CASE WHEN coalesce(%(run_at)s::timestamptz,
                           coalesce(%(now)s::timestamptz, now()) + make_interval(secs => coalesce(%(delay)s::float8, 0)))
                  > coalesce(%(now)s::timestamptz, now())
             THEN 'scheduled' ELSE 'pending' END::__schema__.job_state,
        %(max_attempts)s::integer, coalesce(%(now)s::timestamptz, now()), %(idempotency_key)s::uuid,
        %(result_wanted)s::boolean, %(trace_context)s::jsonb)
-- The producer role may read back only id and available_at (not state).
RETURNING id, available_at, available_at > coalesce(%(now)s::timestamptz, now()) AS scheduled,
          CASE WHEN %(notify)s::boolean
               THEN pg_notify(%(channel)s,
                              CASE WHEN available_at > coalesce(%(now)s::timestamptz, now())
                                   THEN %(scheduled_prefix)s || extract(epoch FROM available_at)::text
                                   ELSE %(queue)s::text END) IS NULL
          END AS notified;

-- name: job_find_holder
-- The stored job that kept one job out of job_insert_many: the one with its idempotency key,
-- else the one holding its unique key now (both computed as the insert did, through functions
-- that answer only for a key the caller already knows: the producer role reads no keys).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), key AS (
    SELECT CASE WHEN %(unique_period)s::float8 IS NULL THEN %(unique_key)s::text
                ELSE %(unique_key)s::text || '@'
                     || floor(extract(epoch FROM clock.now) / %(unique_period)s::float8)::bigint
           END AS held
    FROM clock
)
SELECT h.id, h.available_at, h.by_idempotency_key, key.held AS unique_key
FROM key
CROSS JOIN LATERAL (
    SELECT f.id, f.available_at, true AS by_idempotency_key
    FROM __schema__.job_by_idempotency_key(%(idempotency_key)s::uuid) f
    UNION ALL
    SELECT f.id, f.available_at, false
    FROM __schema__.job_holding_unique_key(key.held) f
    LIMIT 1
) h;

-- name: queue_notify
-- Wakes listeners: each queue given, and promoters when %(first_scheduled)s (the earliest run
-- time among scheduled jobs) is not NULL, as job_insert_many does.
-- With %(after_commit)s it is a transaction of its own, sent after the jobs' own transaction
-- committed, and that transaction commits without waiting for its WAL flush: a notification is
-- only a hint (workers poll too), and PostgreSQL serializes the commits of every transaction
-- that notifies, holding its lock through the commit's flush. A notifying enqueue therefore
-- commits one at a time, server-wide; a notification committed asynchronously holds that lock
-- for microseconds. Never with after_commit inside a caller's transaction: the setting would
-- make the caller's commit asynchronous too.
WITH commit_mode AS (
    SELECT set_config('synchronous_commit', 'off', true) AS set WHERE %(after_commit)s::boolean
)
SELECT count(pg_notify(%(channel)s, w.payload)) AS n
FROM (SELECT q AS payload FROM unnest(%(queues)s::text[]) AS q
      UNION ALL
      SELECT %(scheduled_prefix)s || extract(epoch FROM %(first_scheduled)s::timestamptz)::text
      WHERE %(first_scheduled)s::timestamptz IS NOT NULL) w
CROSS JOIN (SELECT count(*) FROM commit_mode) m;

-- name: job_get
SELECT id, queue, task, payload, state::text AS state, priority, available_at, attempt_count,
       max_attempts, lease_owner, lease_token, lease_expires_at, lease_deadline, progress,
       last_error_code, last_error, idempotency_key, created_at, attempted_at, finished_at,
       ordering_key, result, result_wanted, snoozes
FROM __schema__.jobs
WHERE id = %(id)s;

-- name: jobs_matching
-- The jobs of %(tasks)s (NULL: any) on %(queue)s (NULL: any) in %(states)s whose payload holds
-- %(contains)s (NULL: any), oldest first: what an application's tests assert was enqueued
-- (tenure.testing).
SELECT id, queue, task, payload, state::text AS state, priority, available_at, attempt_count,
       max_attempts, lease_owner, lease_token, lease_expires_at, lease_deadline, progress,
       last_error_code, last_error, idempotency_key, created_at, attempted_at, finished_at,
       ordering_key, result, result_wanted, snoozes
FROM __schema__.jobs
WHERE (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND state::text = ANY(%(states)s::text[])
  AND (%(contains)s::jsonb IS NULL OR payload @> %(contains)s::jsonb)
ORDER BY id
LIMIT %(limit)s;

-- name: job_events_list
SELECT id, job_id, event, from_state::text AS from_state, to_state::text AS to_state, token,
       worker, error_code, error, at
FROM __schema__.job_events
WHERE job_id = %(job_id)s
ORDER BY id;

-- name: clock_now
SELECT now() AS now;

-- name: job_copy_in
-- Bulk enqueue; the caller computes available_at from clock_now in the same transaction, and
-- the state from it (scheduled when later than that now), as job_insert_many does.
COPY __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts, result_wanted)
FROM STDIN (FORMAT BINARY);

-- name: jobs_insert_allowed
-- Whether this connection's role may insert jobs itself (the application's own role, the admin),
-- or must enqueue through enqueue() (the producer role, which may not write jobs).
SELECT has_column_privilege('__schema__.jobs', 'unique_states', 'INSERT') AS allowed;

-- name: job_enqueue_call
-- The jobs of %(jobs)s (job_insert_many's JSON array) through enqueue(), in order, for a role
-- that may not insert jobs itself: each is completed and checked by the database (docs/sql.md).
-- With %(notify)s false the caller notifies after its commit, as job_insert_many's callers do.
SELECT e.id, e.available_at, e.existing, e.scheduled
FROM jsonb_array_elements(%(jobs)s::jsonb) WITH ORDINALITY AS i(j, ord)
CROSS JOIN LATERAL __schema__.enqueue(
    task => i.j->>'task',
    payload => i.j->'payload',
    queue => i.j->>'queue',
    run_at => (i.j->>'run_at')::timestamptz,
    delay_seconds => (i.j->>'delay')::float8,
    priority => (i.j->>'priority')::integer,
    max_attempts => (i.j->>'max_attempts')::integer,
    ordering_key => i.j->>'ordering_key',
    idempotency_key => (i.j->>'idempotency_key')::uuid,
    unique_key => i.j->>'unique_part',
    unique_states => (i.j->>'unique_states')::__schema__.job_state[],
    unique_period_seconds => (i.j->>'unique_period')::float8,
    result_wanted => (i.j->>'result_wanted')::boolean,
    trace_context => i.j->'trace_context',
    notify => %(notify)s::boolean) e
ORDER BY i.ord;

-- name: task_policies_declare
-- A worker declares its app's tasks (what enqueue() completes a job from); the last declaration
-- of a task wins, as for queue limits.
INSERT INTO __schema__.task_policies AS p (task, queue, priority, max_attempts, unique_fields, unique_whole,
                                           unique_states, unique_period, declared_by, declared_at)
SELECT t->>'task', t->>'queue', (t->>'priority')::smallint, (t->>'max_attempts')::integer,
       CASE WHEN t ? 'unique_fields' THEN ARRAY(SELECT jsonb_array_elements_text(t->'unique_fields')) END,
       coalesce((t->>'unique_whole')::boolean, false),
       (t->>'unique_states')::__schema__.job_state[], (t->>'unique_period')::float8,
       %(declared_by)s, statement_timestamp()
FROM jsonb_array_elements(%(tasks)s::jsonb) AS e(t)
ON CONFLICT (task) DO UPDATE
SET queue = EXCLUDED.queue,
    priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts,
    unique_fields = EXCLUDED.unique_fields,
    unique_whole = EXCLUDED.unique_whole,
    unique_states = EXCLUDED.unique_states,
    unique_period = EXCLUDED.unique_period,
    declared_by = EXCLUDED.declared_by,
    declared_at = EXCLUDED.declared_at;
