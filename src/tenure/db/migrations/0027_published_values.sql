-- 0027: published values (docs/workflows.md, "Publishing a value for the caller"). A running job
-- publishes a value under a key, for whoever enqueued it to read or wait for: a workflow's step
-- publishes on its workflow, any other job on itself. The latest value of a key stands (a later
-- publish replaces it). Written under the job's fence: a holder that lost its lease publishes
-- nothing. Kept as long as what it belongs to is kept (the workflow, or the job).

CREATE TABLE __schema__.published_values (
    workflow_id bigint REFERENCES __schema__.workflows (id) ON DELETE CASCADE,
    job_id      bigint REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    key         text NOT NULL,
    value       jsonb NOT NULL,
    published_at timestamptz NOT NULL,
    -- The job, and the attempt (fencing token), that published it.
    by_job      bigint NOT NULL,
    token       bigint NOT NULL,
    CONSTRAINT published_values_one_owner CHECK ((workflow_id IS NULL) <> (job_id IS NULL)),
    CONSTRAINT published_values_key_length CHECK (char_length(key) BETWEEN 1 AND 200),
    CONSTRAINT published_values_value_size CHECK (octet_length(value::text) <= 65536)
);
-- One value per owner and key: the owner is the workflow, or the job when it is none.
CREATE UNIQUE INDEX published_values_owner_idx
    ON __schema__.published_values ((coalesce(workflow_id, job_id)), (workflow_id IS NULL), key);
