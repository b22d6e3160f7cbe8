-- The soak's checks of per-key ordering and of the effect ledger.

-- name: soak_ordering_violations
-- Keyed jobs that did not succeed, or whose last claim came before the previous job of their
-- key finished: either means a key's jobs ran out of order or overlapped. (Every claim of a
-- follower comes after its predecessor finished; the last claim is the one the row keeps.)
WITH keyed AS (
    SELECT id, ordering_key, state, attempted_at,
           lag(finished_at) OVER (PARTITION BY ordering_key ORDER BY id) AS previous_finished,
           lag(state) OVER (PARTITION BY ordering_key ORDER BY id) AS previous_state
    FROM __schema__.jobs
    WHERE ordering_key IS NOT NULL
)
SELECT count(*) AS keyed,
       count(DISTINCT ordering_key) AS keys,
       count(*) FILTER (WHERE state <> 'succeeded') AS not_succeeded,
       count(*) FILTER (WHERE previous_finished IS NOT NULL AND attempted_at < previous_finished)
           AS out_of_order
FROM keyed;

-- name: soak_effect_states
-- The ledger of the soak's effect jobs, by the job's state and the effect's.
SELECT j.state::text AS job_state, coalesce(e.state, 'none') AS effect_state, count(*) AS jobs
FROM __schema__.jobs j
LEFT JOIN __schema__.job_effects e ON e.job_id = j.id
WHERE j.task = %(task)s
GROUP BY 1, 2
ORDER BY 1, 2;
