-- 0002: per-key ordering, priority aging and the effect ledger.
-- In steps (migrate.py, STEP): each constraint is added NOT VALID, which takes the table's lock
-- only for a moment, and validated in a later step, which scans without blocking writes.
-- Every step can run again after a failure part-way.

-- Jobs that share an ordering key run one at a time, in id order; enqueue serialises the ids
-- of one key so they follow commit order.
ALTER TABLE __schema__.jobs ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_ordering_key_length;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_ordering_key_length
    CHECK (char_length(ordering_key) BETWEEN 1 AND 200) NOT VALID;

-- How many aging steps `priority` has been raised above the priority given at enqueue.
ALTER TABLE __schema__.jobs ADD COLUMN IF NOT EXISTS priority_boost smallint NOT NULL DEFAULT 0;
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_priority_boost_nonnegative;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_priority_boost_nonnegative CHECK (priority_boost >= 0) NOT VALID;

-- The claim's "is this the head of its key?" probe (jobs_ordering_idx) is built by migration
-- 0008, CONCURRENTLY, so that an upgrade does not block writes to a large jobs table.

-- One row per named external effect of a job: intent before the call, outcome after it.
CREATE TABLE IF NOT EXISTS __schema__.job_effects (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint NOT NULL REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    name        text NOT NULL,
    state       text NOT NULL,
    token       bigint NOT NULL,
    outcome     jsonb,
    resolved_by text,
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_effects_one_per_name UNIQUE (job_id, name),
    CONSTRAINT job_effects_state_known CHECK (state IN ('intent', 'done', 'uncertain', 'not_happened')),
    CONSTRAINT job_effects_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT job_effects_reason_bounded CHECK (char_length(reason) <= 2000)
);
CREATE INDEX IF NOT EXISTS job_effects_uncertain_idx ON __schema__.job_effects (updated_at) WHERE state = 'uncertain';

-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_ordering_key_length;
-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_priority_boost_nonnegative;
