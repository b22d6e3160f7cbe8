-- tenure: no-transaction
-- 0029: a published value found by its job, and by its workflow, through an index of its own.
-- Deleting a job or a workflow (the retention pass, `tenure purge`) deletes its published values
-- through their foreign keys, and PostgreSQL finds them with `WHERE job_id = $1` (or
-- `workflow_id = $1`), once for each row deleted. The one index of the table is on
-- `coalesce(workflow_id, job_id)`, which that lookup cannot use: every job deleted read the whole
-- table, so a retention pass grew with the product of the jobs it deleted and the values kept.
-- Each index holds only the rows of its kind of owner (a value has one owner), so a value is in
-- one of them. Built CONCURRENTLY (the table may be large), each after dropping what an
-- interrupted build left, so that a rerun builds it again.

DROP INDEX CONCURRENTLY IF EXISTS __schema__.published_values_job_idx;
CREATE INDEX CONCURRENTLY published_values_job_idx ON __schema__.published_values (job_id)
    WHERE job_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS __schema__.published_values_workflow_idx;
CREATE INDEX CONCURRENTLY published_values_workflow_idx ON __schema__.published_values (workflow_id)
    WHERE workflow_id IS NOT NULL;
