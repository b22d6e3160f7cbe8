-- 0010: periodic jobs. A schedule is declared in an app's code; every worker of that app
-- upserts it here and fires its due slots. The row is what makes each slot fire once with any
-- number of schedulers: a fire locks it, inserts only slots later than `last_slot` and moves
-- `last_slot` on, in one statement. `key_namespace` is the schedule's secret part of its jobs'
-- idempotency keys (uuid5 of the slot), so no producer can guess a future slot's key and take
-- it first. Pausing is an operator's act: the worker role may not write the pause columns.
CREATE TABLE __schema__.schedules (
    name            text PRIMARY KEY,
    task            text NOT NULL,
    queue           text NOT NULL,
    cron            text NOT NULL,
    timezone        text NOT NULL,
    payload         jsonb NOT NULL DEFAULT '{}',
    priority        smallint NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 20,
    missed          text NOT NULL DEFAULT 'latest',
    key_namespace   uuid NOT NULL DEFAULT gen_random_uuid(),
    last_slot       timestamptz NOT NULL,
    last_fired_slot timestamptz,
    paused          boolean NOT NULL DEFAULT false,
    paused_at       timestamptz,
    paused_by       text,
    pause_reason    text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    declared_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT schedules_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT schedules_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    CONSTRAINT schedules_cron_length CHECK (char_length(cron) BETWEEN 1 AND 200),
    CONSTRAINT schedules_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT schedules_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT schedules_missed_known CHECK (missed ~ '^(skip|latest|backfill:[1-9][0-9]{0,3})$'),
    CONSTRAINT schedules_fired_before_last CHECK (last_fired_slot IS NULL OR last_fired_slot <= last_slot),
    CONSTRAINT schedules_pause_recorded CHECK (
        (paused AND paused_at IS NOT NULL AND paused_by IS NOT NULL AND pause_reason IS NOT NULL)
        OR (NOT paused AND paused_at IS NULL AND paused_by IS NULL AND pause_reason IS NULL)),
    CONSTRAINT schedules_pause_bounded CHECK (
        char_length(pause_reason) BETWEEN 1 AND 2000 AND char_length(paused_by) BETWEEN 1 AND 200)
);

-- One row per fired slot: the schedule's history, kept when the schedule is no longer declared.
-- The primary key is the last of the three guards against a slot firing twice. job_id has no
-- foreign key: retention deletes finished jobs, and their schedule's history outlives them.
CREATE TABLE __schema__.schedule_fires (
    schedule text NOT NULL REFERENCES __schema__.schedules (name) ON DELETE CASCADE,
    slot     timestamptz NOT NULL,
    job_id   bigint NOT NULL,
    worker   text,
    fired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, slot)
);
-- Retention of the history, oldest first.
CREATE INDEX schedule_fires_fired_at_idx ON __schema__.schedule_fires (fired_at);
