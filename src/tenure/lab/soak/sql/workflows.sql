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
