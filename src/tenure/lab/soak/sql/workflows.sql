-- The soak's workflows (tenure.lab.soak.workflows): what became of each step.

-- name: soak_workflow_steps
-- Every step of the given workflows: its state, its result, the input its job received, and how
-- many jobs it has (one at most: a step is released once).
SELECT s.workflow_id, s.name, s.state, s.remaining, s.result, s.job_id,
       (SELECT count(*) FROM __schema__.jobs j WHERE j.workflow_id = s.workflow_id AND j.workflow_step = s.name)
           AS jobs,
       (SELECT j.payload FROM __schema__.jobs j WHERE j.id = s.job_id) AS payload
FROM __schema__.workflow_steps s
WHERE s.workflow_id = ANY(%(ids)s::bigint[])
ORDER BY s.workflow_id, s.job_id;

-- name: soak_step_conditions
-- Every step with a condition among the given workflows: how its condition ended, and how many
-- signals were delivered to its job (one: its own, once).
SELECT s.workflow_id, s.name, w.state AS wait,
       (SELECT count(*) FROM __schema__.signals x WHERE x.job_id = s.job_id) AS delivered
FROM __schema__.workflow_steps s
LEFT JOIN __schema__.job_waits w ON w.job_id = s.job_id AND w.name = '@step'
WHERE s.workflow_id = ANY(%(ids)s::bigint[]) AND s.condition IS NOT NULL
ORDER BY s.workflow_id;

-- name: soak_lock_step
-- A foreign session's lock on one workflow step's row (an operator's open transaction): the
-- completion of its parent must wait for it, and nothing else may.
SELECT s.name FROM __schema__.workflow_steps s
WHERE s.workflow_id = %(id)s AND s.name = %(step)s
FOR UPDATE;

-- name: soak_step_jobs
-- The state of each job of one workflow, by step, and the database's clock.
SELECT j.workflow_step AS step, j.state::text AS state, statement_timestamp() AS db_now
FROM __schema__.jobs j
WHERE j.workflow_id = %(id)s
ORDER BY j.id;

-- name: soak_held_steps
-- The held steps of the given workflows, with their reasons.
SELECT s.workflow_id, s.name, s.held_reason
FROM __schema__.workflow_steps s
WHERE s.workflow_id = ANY(%(ids)s::bigint[]) AND s.state = 'held';
