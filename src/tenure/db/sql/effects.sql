-- The effect ledger: a job records its intent before an external call and the outcome
-- after it. An intent that outlives its attempt means "the call may or may not have happened":
-- the next attempt turns it into 'uncertain', and only a reconciliation (the application's hook
-- or an operator) may let the effect run again.

-- part: effect_lease
-- The job's row while its holder's lease holds under this token (only the lease holder writes
-- the ledger); no row once it does not.
SELECT j.id FROM __schema__.jobs j CROSS JOIN clock
WHERE j.id = %(job_id)s
  AND j.lease_token = %(token)s AND __part_lease_live__

-- name: effect_begin
-- Fenced (only the lease holder records an intent): returns what the attempt must do with the
-- effect. 'perform': a fresh intent was recorded under this token; 'done': return the recorded
-- outcome; 'uncertain': an earlier attempt's intent (or an unresolved uncertainty) stands.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), lease AS (
    __part_effect_lease__
), recorded AS (
    INSERT INTO __schema__.job_effects AS e (job_id, name, state, token, created_at, updated_at)
    SELECT lease.id, %(name)s, 'intent', %(token)s, clock.now, clock.now
    FROM lease CROSS JOIN clock
    ON CONFLICT (job_id, name) DO UPDATE
    SET state = CASE
                    WHEN e.state = 'not_happened' THEN 'intent'
                    WHEN e.state = 'intent' THEN 'uncertain'
                    ELSE e.state
                END,
        token = CASE WHEN e.state = 'not_happened' THEN excluded.token ELSE e.token END,
        updated_at = CASE WHEN e.state IN ('not_happened', 'intent') THEN excluded.updated_at
                          ELSE e.updated_at END
    RETURNING e.id, e.state, e.token, e.outcome
)
SELECT id,
       CASE WHEN state = 'intent' THEN 'perform' ELSE state END AS action,
       token, outcome
FROM recorded;

-- name: effect_done
-- The outcome of a performed call. Guarded by the ledger row, not by the lease: the call did
-- happen, and saying so is true even if the lease expired meanwhile -- unless a later attempt
-- already took the intent over as 'uncertain', whose reconciliation then decides.
UPDATE __schema__.job_effects
SET state = 'done', outcome = %(outcome)s, updated_at = coalesce(%(now)s::timestamptz, statement_timestamp())
WHERE job_id = %(job_id)s AND name = %(name)s AND state = 'intent' AND token = %(token)s
RETURNING id;

-- name: effect_reconciled
-- The reconciliation hook's verdict on an uncertain effect, fenced like an intent: 'done' with
-- the confirmed outcome, or 'intent' under this token when the call did not happen (perform now).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), lease AS (
    __part_effect_lease__
)
UPDATE __schema__.job_effects e
SET state = %(state)s,
    outcome = %(outcome)s,
    token = %(token)s,
    resolved_by = %(owner)s,
    reason = 'reconciled by the application hook',
    updated_at = clock.now
FROM lease CROSS JOIN clock
WHERE e.job_id = lease.id AND e.name = %(name)s AND e.state = 'uncertain'
RETURNING e.id;

-- name: effect_list
SELECT e.id, e.job_id, j.queue, j.task, e.name, e.state, e.token, e.outcome, e.resolved_by, e.reason,
       e.created_at, e.updated_at, j.state::text AS job_state
FROM __schema__.job_effects e
JOIN __schema__.jobs j ON j.id = e.job_id
WHERE (%(state)s::text IS NULL OR e.state = %(state)s::text)
  AND (%(job_id)s::bigint IS NULL OR e.job_id = %(job_id)s::bigint)
ORDER BY e.updated_at, e.id
LIMIT %(limit)s;

-- name: effect_resolve
-- An operator's verdict on an uncertain effect: 'done' (it happened) or 'not_happened' (the
-- next attempt performs it). Only uncertain effects, or intents whose job is not running, can
-- be resolved, so an attempt in flight is never second-guessed.
UPDATE __schema__.job_effects e
SET state = %(state)s,
    outcome = coalesce(%(outcome)s, e.outcome),
    resolved_by = %(actor)s,
    reason = left(%(reason)s, 2000),
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp())
FROM __schema__.jobs j
WHERE e.id = %(id)s
  AND j.id = e.job_id
  AND (e.state = 'uncertain' OR (e.state = 'intent' AND j.state <> 'running'))
RETURNING e.id, e.job_id, j.state::text AS job_state;
