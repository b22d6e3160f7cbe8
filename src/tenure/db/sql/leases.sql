-- The worker's side of the lease state machine. Every write after the claim is fenced:
-- it matches id, owner, token, state 'running' and an unexpired lease, all in database time.
-- Clocks here are statement_timestamp(), not now(): a fenced completion inside a handler's own
-- transaction (ctx.atomic) must be judged at the moment it runs, not when the transaction began.

-- The claim family: job_claim (a queue without limits; job_claim_by_priority when no oldest
-- share is due) and job_claim_limited (a queue with them) choose differently, and share every
-- rule below, written once.

-- part: lease_live
-- The fence every write after the claim passes (j: the job; the clock CTE in scope): the job
-- runs under this worker's lease, and the lease has not run out by the database's clock. Each
-- write matches the lease's token beside it.
-- Every statement that uses it finds its rows by primary key. The state is compared as text so
-- that no plan can reach the rows through jobs_running_expiry_idx instead: on a table whose
-- statistics predate the drain (never analyzed, or analyzed when few jobs ran), the planner
-- took that partial index for small and scanned it for every completion batch, reading every
-- entry each completed job had left in it (about 100 index tuples per job in a drain of 20,000).
j.state::text = 'running'
AND j.lease_owner = %(owner)s
AND j.lease_expires_at > clock.now

-- part: id_bounds
-- The rows of j that a statement takes by primary key (`j.id = ANY(...)` beside this) lie between
-- the least and the greatest id of its `ids` CTE. That says nothing the ids do not, but it
-- keeps the plan on jobs_pkey when the plan was made while the planner took the table for small
-- (never analyzed: ten pages; analyzed nearly empty) and a prepared statement then reuses it as
-- the table grows. Without the bounds, `id = ANY` over an array of unknown length costs more by
-- index than a scan of those ten pages, and the cached plan scanned the whole table for every
-- claim and completion: 21 ms a claim at 200,000 rows, against 2 ms planned afresh.
j.id BETWEEN (SELECT min(id) FROM ids) AND (SELECT max(id) FROM ids)

-- part: attempt_holds
-- Job %(id)s runs under this attempt's lease (token %(token)s), live by the database's clock (j:
-- the job; the clock CTE in scope): what a single job's fenced write (a snooze, a wait) matches,
-- and what tells 'busy' (locked elsewhere, still ours) from 'lost' when it matched nothing.
j.id = %(id)s
AND j.lease_token = %(token)s AND __part_lease_live__

-- part: claimable
-- A job the claim may take (c: the candidate; the clock and paused CTEs in scope): pending in
-- the queue and due, of a task the worker runs (%(tasks)s, NULL: any), one of %(only)s when
-- given (tenure.testing runs one chosen job), its queue not paused, and the head of its ordering
-- key: nothing of its key is running, and nothing earlier is waiting (scheduled or pending) or
-- dead. Unkeyed rows skip the probe.
-- The due test is written so that it cannot be an index condition: only due jobs are pending, so
-- it filters next to nothing, and as a condition on jobs_claimable_by_age_idx it made that index
-- look the more selective one on some statistics, where the priority lane then read every pending
-- job of the queue through it and sorted them (12 ms a claim at 38,000 pending, not 0.1).
c.state = 'pending'
AND c.queue = %(queue)s
AND c.available_at + interval '0' <= (SELECT now FROM clock)
AND (%(tasks)s::text[] IS NULL OR c.task = ANY(%(tasks)s::text[]))
AND (%(only)s::bigint[] IS NULL OR c.id = ANY(%(only)s::bigint[]))
AND (c.ordering_key IS NULL OR NOT EXISTS (
      SELECT 1 FROM __schema__.jobs o
      WHERE o.ordering_key = c.ordering_key
        AND o.state IN ('scheduled', 'pending', 'running', 'dead')
        AND o.id <> c.id
        AND (o.state = 'running' OR o.id < c.id)))
AND NOT (SELECT yes FROM paused)

-- part: lease_policy
-- The policy CTE's rows (the clock CTE in scope): each task the worker sent a lease policy for,
-- with the end of its lease and of its runtime for a job claimed now, worked out once a claim.
SELECT p.task, clock.now + make_interval(secs => p.runtime) AS deadline,
       clock.now + make_interval(secs => least(p.lease, p.runtime)) AS expiry
FROM unnest(%(policy_tasks)s::text[], %(policy_leases)s::float8[], %(policy_runtimes)s::float8[])
    AS p(task, lease, runtime)
    CROSS JOIN clock

-- part: take_lease
-- The claim's transition (j: the job; the claim_clock and policy CTEs in scope): running, one
-- attempt more, the next fencing token, and a lease of the task's length, never past its max
-- runtime. A worker sends only the tasks whose lease or runtime differ from its defaults, and
-- the ends of both leases are worked out once a claim, not once a job: the three lookups of each
-- job's task in the policy, each with its interval arithmetic, cost 2-3 us of server CPU a job.
state = 'running',
attempt_count = j.attempt_count + 1,
lease_token = j.lease_token + 1,
lease_owner = %(owner)s,
attempted_at = clock.now,
lease_deadline = coalesce((SELECT p.deadline FROM policy p WHERE p.task = j.task), clock.deadline),
lease_expires_at = coalesce((SELECT p.expiry FROM policy p WHERE p.task = j.task), clock.expiry)

-- part: claim_clock
-- The claim's clock CTE: the database's time (or %(now)s), and the end of the worker's default
-- lease and of its runtime for a job claimed now.
clock AS (
    SELECT t.now,
           t.now + make_interval(secs => %(default_runtime_seconds)s::float8) AS deadline,
           t.now + make_interval(secs => least(%(default_lease_seconds)s::float8,
                                               %(default_runtime_seconds)s::float8)) AS expiry
    FROM (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) t
)

-- part: claimed_columns
-- What a claim returns of each job it took, in the order CLAIM_COLUMNS (queries.py) names. The
-- payload comes as its text, the same text jsonb's output is: the worker decodes it itself, and
-- looks there for a secret reference's key before walking the decoded value (claimed_job). A
-- cast keeps its column's name (no alias: job_claim_limited is near psycopg's query cache limit).
j.id, j.queue, j.task, j.payload::text, j.priority, j.attempt_count, j.max_attempts,
j.lease_token, j.lease_expires_at, j.lease_deadline, j.progress, j.idempotency_key,
j.available_at, j.created_at, clock.now AS db_now, j.result_wanted, j.snoozes, j.trace_context

-- part: claim_paused
-- The paused CTE of job_claim and job_claim_by_priority (the clock CTE in scope): a paused queue
-- gives nothing, to every worker, from the moment the pause commits; nor does a limited queue
-- here: job_claim_limited claims from it, one claim at a time.
paused AS (
    SELECT EXISTS (
        SELECT 1 FROM __schema__.queue_pauses p
        WHERE p.queue = %(queue)s AND (p.until IS NULL OR p.until > (SELECT now FROM clock)))
        OR EXISTS (SELECT 1 FROM __schema__.queue_limits l WHERE l.queue = %(queue)s) AS yes
)

-- part: claim_by_priority_order
-- The order the by-priority lane takes jobs in: an ordered scan of jobs_claimable_idx.
ORDER BY c.priority DESC, c.available_at, c.id
LIMIT %(by_priority)s
FOR UPDATE SKIP LOCKED

-- part: claim_leases
-- The end of every claim (its ids, clock and policy CTEs in scope): the lease taken on each job
-- the claim locked, and what the worker is told of it.
-- By primary key, not a join: a prepared claim settles on a generic plan, made without knowing
-- the batch is small, and a join there becomes a scan of every pending row. The lanes took these
-- rows pending and hold their row locks until this statement ends, so nothing can have moved
-- them since. No state test here: `state = 'pending'` lets the planner reach the ids through a
-- claimable partial index, and on statistics that predate a bulk load it did, reading every
-- pending entry of the queue for each claim (40-60 ms a claim at 30,000 pending).
UPDATE __schema__.jobs j
SET __part_take_lease__
FROM clock
WHERE j.id = ANY(ARRAY(SELECT id FROM ids))
  AND __part_id_bounds__
RETURNING __part_claimed_columns__

-- name: job_claim
-- Claim and transition in one statement; each claim bumps the token and the attempt.
-- Two lanes, each an ordered scan of its own partial index, with no sort at any backlog:
-- the %(oldest)s oldest due jobs of the queue whatever their priority (the starvation bound,
-- docs/ordering.md), then the rest of %(limit)s by priority. Only tasks named in %(tasks)s are
-- taken (NULL: any task), so a worker never claims a job it cannot run.
-- Lease length and max runtime come from the worker's task policies, by task name.
-- A claim with no oldest share due is job_claim_by_priority instead: the same lane alone.
WITH __part_claim_clock__, __part_claim_paused__, oldest AS (
    SELECT c.id
    FROM __schema__.jobs c
    WHERE __part_claimable__
    ORDER BY c.available_at, c.id
    LIMIT %(oldest)s
    FOR UPDATE SKIP LOCKED
), by_priority AS (
    SELECT c.id
    FROM __schema__.jobs c
    WHERE __part_claimable__
      -- SKIP LOCKED does not skip rows this statement itself locked in the other lane.
      AND c.id NOT IN (SELECT id FROM oldest)
      -- An oldest lane that came back short took every job it could (the same jobs, by age): this
      -- lane would find none, and is not walked. Each lane's scan steps over the entries that
      -- jobs claimed since the last vacuum left at the front of its index, so a claim that finds
      -- fewer jobs than it asks for (jobs arriving one by one, an idle queue) walks once, not twice.
      AND (SELECT count(*) FROM oldest) >= %(oldest)s
    __part_claim_by_priority_order__
), ids AS (
    SELECT id FROM oldest
    UNION ALL
    SELECT id FROM by_priority
), policy AS (
    __part_lease_policy__
)
__part_claim_leases__;

-- name: job_claim_by_priority
-- job_claim when no job of the claim is due to be the queue's oldest (%(oldest)s is 0): the
-- by-priority lane alone. Most claims of jobs arriving one by one are such claims (one job in
-- every oldest_every is the oldest's), and an idle worker's claim is on the path from an enqueue
-- to its handler's start: the second lane, even when it takes nothing, is a scan, a lock clause
-- and a union more for the server to set up and run (0.1 ms of the idle claim, docs/performance.md).
WITH __part_claim_clock__, __part_claim_paused__, by_priority AS (
    SELECT c.id
    FROM __schema__.jobs c
    WHERE __part_claimable__
    __part_claim_by_priority_order__
), ids AS (
    SELECT id FROM by_priority
), policy AS (
    __part_lease_policy__
)
__part_claim_leases__;

-- name: limit_lock
-- First statement of a limited queue's claim transaction: claims of that queue, from every
-- worker, then run one at a time, each seeing the running count the one before left. Tried, not
-- waited for: a claimer that holds the turn and stalls (paused, partitioned) must not stall every
-- other worker's claims of the queue, nor their claim passes. The answer is kept in a
-- transaction-local setting that job_claim_limited reads, so the two statements still go out in
-- one round trip and the claim takes nothing when the turn was not had.
SELECT set_config('tenure.limit_turn',
                  pg_try_advisory_xact_lock(hashtext(%(lock_space)s), hashtext(%(queue)s))::text, true);

-- name: job_claim_limited
-- The claim of a limited queue, after limit_lock in the same transaction. How many it may
-- take: the batch, at most max_running less the queue's live leases, at most the whole tokens of
-- the queue's bucket. Which: a window of the queue's best due jobs by priority, then the first of
-- each key before any second (round robin across keys), leaving out keys whose live leases
-- already reach max_running_per_key. Everything else is as job_claim (one lane, by priority).
-- The window is a preference, like every order here: when its first %(window)s due jobs all
-- belong to keys at their limit, this claim takes nothing, though a job deeper in the queue
-- could run (docs/limits.md).
-- Nothing here waits on a lock held elsewhere: without the claim turn (limit_lock) there is no
-- limits row to read; a limits row locked elsewhere is skipped, so the queue takes nothing this
-- time (its bucket cannot be spent); and a chosen job locked elsewhere is skipped, the rest of
-- the choice taken.
WITH __part_claim_clock__, lim AS (
    SELECT * FROM __schema__.queue_limits
    WHERE queue = %(queue)s AND current_setting('tenure.limit_turn', true) = 'true'
    FOR UPDATE SKIP LOCKED
), paused AS (
    SELECT EXISTS (
        SELECT 1 FROM __schema__.queue_pauses p
        WHERE p.queue = %(queue)s AND (p.until IS NULL OR p.until > (SELECT now FROM clock))) AS yes
), live AS (
    SELECT r.payload
    FROM __schema__.jobs r CROSS JOIN clock
    WHERE r.state = 'running' AND r.queue = %(queue)s AND r.lease_expires_at > clock.now
), bucket AS (
    SELECT least(l.rate::float8, l.tokens + extract(epoch FROM clock.now - l.refilled_at) * l.rate / l.per_seconds)
               AS tokens
    FROM lim l CROSS JOIN clock
    WHERE l.rate IS NOT NULL
), budget AS (
    SELECT greatest(0, least(
        %(limit)s,
        coalesce(l.max_running - (SELECT count(*) FROM live), %(limit)s),
        coalesce((SELECT floor(tokens)::integer FROM bucket), %(limit)s)))::integer AS n
    FROM lim l
), pool AS (
    SELECT c.id, c.priority, c.available_at,
           CASE WHEN l.key_field IS NULL THEN c.id::text ELSE c.payload ->> l.key_field END AS k
    FROM __schema__.jobs c CROSS JOIN lim l
    WHERE __part_claimable__
      AND (SELECT n FROM budget) > 0
    ORDER BY c.priority DESC, c.available_at, c.id
    -- Without a per-key limit the batch's own size is the window. No row locks here: claims of
    -- this queue run one at a time (limit_lock), and only the jobs taken are locked (locked).
    LIMIT (SELECT CASE WHEN l.key_field IS NULL THEN %(limit)s ELSE %(window)s END FROM lim l)
), held AS (
    SELECT v.payload ->> l.key_field AS k, count(*) AS n
    FROM live v CROSS JOIN lim l
    WHERE l.key_field IS NOT NULL
    GROUP BY 1
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.k ORDER BY c.priority DESC, c.available_at, c.id) AS rn
    FROM pool c
), chosen AS (
    -- Every job the limits allow, best first; the claim takes the first the budget allows of
    -- those it can lock, so a job locked elsewhere costs only itself, not its place in the batch.
    SELECT r.id, row_number() OVER (ORDER BY r.rn, r.priority DESC, r.available_at, r.id) AS ord
    FROM ranked r CROSS JOIN lim l
    LEFT JOIN held h ON h.k IS NOT DISTINCT FROM r.k
    WHERE l.key_field IS NULL OR coalesce(h.n, 0) + r.rn <= l.max_running_per_key
), ids AS (
    SELECT j.id
    FROM unnest(ARRAY(SELECT id FROM chosen ORDER BY ord)) WITH ORDINALITY AS c(id, ord)
    JOIN __schema__.jobs j ON j.id = c.id
    WHERE j.state = 'pending'
    ORDER BY c.ord
    LIMIT (SELECT n FROM budget)
    FOR UPDATE OF j SKIP LOCKED
), policy AS (
    __part_lease_policy__
), claimed AS (
    -- Locked pending by `ids` above, as the plain claim's lanes lock theirs.
    __part_claim_leases__
), spent AS (
    UPDATE __schema__.queue_limits l
    SET tokens = b.tokens - (SELECT count(*) FROM claimed), refilled_at = clock.now
    FROM bucket b CROSS JOIN clock
    WHERE l.queue = %(queue)s
)
SELECT * FROM claimed;

-- name: job_complete_many
-- Fenced success for a batch: each (id, token) whose fence holds and whose row this statement
-- can lock succeeds, and is returned. Rows are locked with SKIP LOCKED, so a row lock held
-- elsewhere (an operator's open SELECT ... FOR UPDATE) costs only that row, which is not
-- returned. Every pair not returned is told apart by job_complete_unsettled, which the caller
-- runs for those alone (usually none): the usual batch pays for nothing but its success.
-- Each job's result is stored with it, and a job a caller waits for (result_wanted) notifies
-- %(results_channel)s unless %(notify_results)s is false (ctx.atomic: the result is stored after
-- the commit, and notifies).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), ids AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS u(id, token)
), locked AS (
    -- By primary key, not joined on `ids`: joined, the plan scans every running job of every
    -- worker, or, on statistics older than the batch, reads all of `ids` again for each job (a
    -- tenth of a millisecond a job). Each row's (id, token) is looked up in a hash of `ids`'
    -- pairs, built once a statement: `IS TRUE` keeps the IN a filter (a hashed subplan) that the
    -- planner cannot turn into that join. Looked up by its place in the arrays instead
    -- (array_position), the token cost a scan of the ids for each job: 4 us a job of server CPU
    -- at a batch of 100. The result still is, only when the batch has results (NULL: skipped).
    SELECT j.id, j.lease_token AS token,
           (%(results)s::jsonb[])[array_position(%(ids)s::bigint[], j.id)] AS result
    FROM __schema__.jobs j
    CROSS JOIN clock
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND __part_id_bounds__
      AND ((j.id, j.lease_token) IN (SELECT t.id, t.token FROM ids t)) IS TRUE
      AND __part_lease_live__
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
), done AS (
    UPDATE __schema__.jobs j
    SET state = 'succeeded',
        finished_at = clock.now,
        result = l.result,
        -- A succeeded job shows no error: an earlier attempt's (a retry's, a requeue's) is in
        -- the job's history, not its outcome.
        last_error_code = NULL,
        last_error = NULL,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL
    FROM locked l CROSS JOIN clock
    WHERE j.id = l.id
      AND j.lease_token = l.token
    RETURNING j.id, j.lease_token AS token, j.result_wanted
), waited AS (
    SELECT count(pg_notify(%(results_channel)s, d.id::text)) AS n
    FROM done d WHERE d.result_wanted AND %(notify_results)s::boolean
)
SELECT id, token FROM done CROSS JOIN waited;

-- name: job_complete_unsettled
-- The outcome of each (id, token) of a fenced success that job_complete_many did not complete:
-- 'done' (succeeded under this token, by an earlier write of ours whose reply was lost), 'busy'
-- (the fence holds but the row is locked elsewhere: try again) or 'lost' (the fence does not
-- hold: logged as fencing_lost). A job that succeeded earlier under the token answers 'done' only
-- with %(repeat_is_done)s: a completion in the handler's own transaction (ctx.atomic) passes
-- false, because its work must not commit beside a success already recorded, and after a
-- failover that lost a claim that success can be another worker's under the same token (the row
-- keeps no owner once succeeded). Reads the rows without locking them: it changes none.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), ids AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS u(id, token)
), others AS (
    SELECT i.id, i.token,
           CASE WHEN j.state = 'succeeded' AND j.lease_token = i.token AND %(repeat_is_done)s::boolean
                THEN 'done'
                WHEN j.lease_token = i.token AND __part_lease_live__ THEN 'busy'
                ELSE 'lost' END AS outcome
    FROM ids i
    CROSS JOIN clock
    LEFT JOIN __schema__.jobs j ON j.id = i.id AND j.id = ANY(%(ids)s::bigint[]) AND __part_id_bounds__
), lost AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code, at)
    SELECT o.id, 'fencing_lost', 'running', o.token, %(owner)s, 'FENCED_COMPLETE', clock.now
    FROM others o CROSS JOIN clock
    WHERE o.outcome = 'lost'
)
SELECT id, token, outcome FROM others;

-- name: job_fail
-- Fenced failure: a retry after %(retry_delay)s seconds (scheduled while it waits out the delay,
-- pending at once when there is none), or dead when the delay is NULL or the attempt budget is
-- spent. Logged either way. Outcome 'failed' (with the new state), 'busy' (the row is
-- locked elsewhere: try again; SKIP LOCKED, so this never waits on it) or 'lost' (logged as
-- fencing_lost). %(at_deadline)s: the job's max runtime is what ended it; the holder may then
-- write the failure even though its lease, capped at the deadline, has run out, as long as the
-- database agrees the deadline has passed and nobody has taken the job since.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT j.id
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE j.id = %(id)s
      AND j.state = 'running'
      AND j.lease_owner = %(owner)s
      AND j.lease_token = %(token)s
      AND (j.lease_expires_at > clock.now OR (%(at_deadline)s::boolean AND j.lease_deadline <= clock.now))
    FOR UPDATE OF j SKIP LOCKED
), failed AS (
    UPDATE __schema__.jobs j
    SET state = CASE WHEN %(retry_delay)s::float8 IS NULL OR j.attempt_count >= j.max_attempts THEN 'dead'
                     WHEN %(retry_delay)s::float8 > 0 THEN 'scheduled'
                     ELSE 'pending' END::__schema__.job_state,
        available_at = CASE WHEN %(retry_delay)s::float8 IS NOT NULL AND j.attempt_count < j.max_attempts
                            THEN clock.now + make_interval(secs => %(retry_delay)s::float8)
                            ELSE j.available_at END,
        finished_at = CASE WHEN %(retry_delay)s::float8 IS NOT NULL AND j.attempt_count < j.max_attempts
                           THEN NULL ELSE clock.now END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL,
        last_error_code = %(error_code)s,
        last_error = left(%(error)s, 2000)
    FROM target t CROSS JOIN clock
    WHERE j.id = t.id
    RETURNING j.id, j.state, j.available_at
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, error, at)
    SELECT f.id, CASE WHEN f.state = 'dead' THEN 'dead' ELSE 'retry' END, 'running', f.state,
           %(token)s, %(owner)s, %(error_code)s, left(%(error)s, 2000), clock.now
    FROM failed f CROSS JOIN clock
), verdict AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM failed) THEN 'failed'
                WHEN EXISTS (
                    SELECT 1 FROM __schema__.jobs j CROSS JOIN clock
                    WHERE j.id = %(id)s AND j.state = 'running' AND j.lease_owner = %(owner)s
                      AND j.lease_token = %(token)s
                      AND (j.lease_expires_at > clock.now
                           OR (%(at_deadline)s::boolean AND j.lease_deadline <= clock.now))) THEN 'busy'
                ELSE 'lost' END AS outcome
), lost AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code, at)
    SELECT %(id)s, 'fencing_lost', 'running', %(token)s, %(owner)s, 'FENCED_FAIL', clock.now
    FROM clock CROSS JOIN verdict
    WHERE verdict.outcome = 'lost'
)
SELECT v.outcome, f.state::text AS state, f.available_at
FROM verdict v LEFT JOIN failed f ON true;

-- name: lease_extend_many
-- Heartbeat: renews only leases whose progress marker moved, never past the deadline.
-- SKIP LOCKED: a row locked elsewhere is left for the next beat instead of stalling the others.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), ids AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(progress)s::jsonb[],
                         %(lease_seconds)s::float8[]) AS u(id, token, progress, lease_seconds)
), locked AS (
    SELECT j.id, i.progress, i.lease_seconds
    FROM __schema__.jobs j
    JOIN ids i ON i.id = j.id AND i.token = j.lease_token
    CROSS JOIN clock
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND __part_id_bounds__
      AND __part_lease_live__
      AND j.lease_deadline > clock.now
      AND j.progress IS DISTINCT FROM i.progress
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE __schema__.jobs j
SET lease_expires_at = least(clock.now + make_interval(secs => l.lease_seconds), j.lease_deadline),
    progress = l.progress
FROM locked l CROSS JOIN clock
WHERE j.id = l.id
RETURNING j.id, j.lease_token, j.lease_expires_at, clock.now AS db_now;

-- name: lease_release_many
-- Give jobs back at once, the attempt not counted: a graceful shutdown's unfinished jobs
-- (%(reason)s SHUTDOWN), a job handed to a worker with no slot for it (NO_SLOT, handoff.sql).
-- A row locked elsewhere is skipped: its lease expires and recovery gives it back instead.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), ids AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS u(id, token)
), locked AS (
    SELECT j.id
    FROM __schema__.jobs j
    JOIN ids i ON i.id = j.id AND i.token = j.lease_token
    CROSS JOIN clock
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND __part_id_bounds__
      AND __part_lease_live__
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
), released AS (
    UPDATE __schema__.jobs j
    SET state = 'pending',
        attempt_count = j.attempt_count - 1,
        available_at = clock.now,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL
    FROM locked l CROSS JOIN clock
    WHERE j.id = l.id
    RETURNING j.id, j.lease_token, j.queue
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, at)
    SELECT r.id, 'released', 'running', 'pending', r.lease_token, %(owner)s, %(reason)s, clock.now
    FROM released r CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM released) q
)
SELECT released.id FROM released CROSS JOIN notified;

-- name: job_snooze
-- Fenced snooze: the holder puts its job back to wait %(delay)s seconds without spending
-- the attempt (scheduled while it waits, pending at once for no delay). A job already snoozed
-- %(max_snoozes)s times goes dead instead, with SNOOZE_LIMIT. Outcomes as job_fail's:
-- 'snoozed' (with the new state), 'busy' (locked elsewhere, try again) or 'lost'.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT j.id, j.snoozes >= %(max_snoozes)s AS over
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE __part_attempt_holds__
    FOR UPDATE OF j SKIP LOCKED
), snoozed AS (
    UPDATE __schema__.jobs j
    SET state = CASE WHEN t.over THEN 'dead'
                     WHEN %(delay)s::float8 > 0 THEN 'scheduled'
                     ELSE 'pending' END::__schema__.job_state,
        attempt_count = CASE WHEN t.over THEN j.attempt_count ELSE j.attempt_count - 1 END,
        snoozes = CASE WHEN t.over THEN j.snoozes ELSE j.snoozes + 1 END,
        available_at = CASE WHEN t.over THEN j.available_at
                            ELSE clock.now + make_interval(secs => %(delay)s::float8) END,
        finished_at = CASE WHEN t.over THEN clock.now END,
        last_error_code = CASE WHEN t.over THEN 'SNOOZE_LIMIT' ELSE j.last_error_code END,
        last_error = CASE WHEN t.over
                          THEN format('snoozed %%s times, the most its task allows (max_snoozes)', j.snoozes)
                          ELSE j.last_error END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL
    FROM target t CROSS JOIN clock
    WHERE j.id = t.id
    RETURNING j.id, j.state, j.available_at, j.queue, j.snoozes, j.result_wanted, j.last_error
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, error, at)
    SELECT s.id, CASE WHEN s.state = 'dead' THEN 'dead' ELSE 'snooze' END, 'running', s.state,
           %(token)s, %(owner)s, CASE WHEN s.state = 'dead' THEN 'SNOOZE_LIMIT' END,
           CASE WHEN s.state = 'dead' THEN s.last_error
                ELSE left(format('snooze %%s of %%s, for %%ss: %%s', s.snoozes, %(max_snoozes)s,
                                 %(delay)s::float8, coalesce(%(reason)s, 'no reason given')), 2000) END,
           clock.now
    FROM snoozed s CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(n.channel, n.payload)) AS n
    FROM (SELECT %(channel)s AS channel, s.queue AS payload FROM snoozed s WHERE s.state = 'pending'
          UNION ALL
          SELECT %(results_channel)s, s.id::text FROM snoozed s WHERE s.state = 'dead' AND s.result_wanted) n
), verdict AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM snoozed) THEN 'snoozed'
                WHEN EXISTS (
                    SELECT 1 FROM __schema__.jobs j CROSS JOIN clock
                    WHERE __part_attempt_holds__) THEN 'busy'
                ELSE 'lost' END AS outcome
), lost AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code, at)
    SELECT %(id)s, 'fencing_lost', 'running', %(token)s, %(owner)s, 'FENCED_SNOOZE', clock.now
    FROM clock CROSS JOIN verdict
    WHERE verdict.outcome = 'lost'
)
SELECT v.outcome, s.state::text AS state, s.available_at
FROM verdict v CROSS JOIN (SELECT count(*) FROM notified) n LEFT JOIN snoozed s ON true;

-- name: job_result_set
-- The result of a job its handler completed in its own transaction (ctx.atomic), stored after
-- that commit: only for the attempt that succeeded (its token), and only once. Wakes a waiter.
WITH stored AS (
    UPDATE __schema__.jobs
    SET result = %(result)s
    WHERE id = %(id)s AND state = 'succeeded' AND lease_token = %(token)s AND result IS NULL
    RETURNING id, result_wanted
), notified AS (
    SELECT count(pg_notify(%(results_channel)s, s.id::text)) AS n FROM stored s WHERE s.result_wanted
)
SELECT s.id FROM stored s CROSS JOIN notified;

-- name: lease_check_many
-- Which of these (id, token) leases this worker no longer holds: revoked, taken over, finished
-- or gone. The heartbeat asks it every beat, so a revoke reaches even a job that reports no
-- progress when the notification did not.
WITH ids AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS u(id, token)
)
SELECT i.id, i.token, j.state::text AS state, j.lease_token AS current_token, j.last_error_code,
       j.last_error
FROM ids i
LEFT JOIN __schema__.jobs j
    ON j.id = i.id AND j.id = ANY(%(ids)s::bigint[]) AND __part_id_bounds__
WHERE j.id IS NULL
   OR j.state <> 'running'
   OR j.lease_token <> i.token
   OR j.lease_owner IS DISTINCT FROM %(owner)s;

-- name: lease_get
-- Why a fenced write failed: the job's current lease as the database sees it.
SELECT id, state::text AS state, lease_owner, lease_token, lease_expires_at, lease_deadline,
       coalesce(%(now)s::timestamptz, statement_timestamp()) AS db_now
FROM __schema__.jobs
WHERE id = %(id)s;

-- name: fencing_lost_record
-- A fenced write that ran inside the handler's own transaction rolled back with it; this keeps
-- the evidence of the stale write in the audit log.
INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code)
VALUES (%(id)s, 'fencing_lost', 'running', %(token)s, %(owner)s, %(error_code)s);

-- name: lease_lost_record
-- The holder of token %(token)s learned that its lease was gone (its watchdog, a refused
-- heartbeat, a newer claim) and stopped the job: the stale holder's side of the history, written
-- when it can reach the database again. It changes nothing but the audit log.
INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code, error)
VALUES (%(id)s, 'lease_lost', 'running', %(token)s, %(owner)s, %(error_code)s, left(%(error)s, 2000));

-- name: jobs_pages
-- The jobs table's size in pages, as the server sees it now: a worker's kept connection is
-- replaced, and its statements planned again, when the table has grown since they were planned.
SELECT (pg_relation_size('__schema__.jobs') / current_setting('block_size')::int)::int AS pages;

-- name: session_reset
-- The last statement of a handler's own transaction (ctx.atomic), after its completion: its SETs
-- must not outlive the transaction, whose server session a transaction pooler lends to another
-- client right after the commit (a reset in a later transaction could land on another session).
-- RESET ALL returns every setting to the session's defaults, startup ones included.
RESET ALL;
