-- The current full schema, applied by `tenure migrate` on an empty database.
-- tests/integration/test_migrations.py proves it equals every migration applied in order;
-- change it only together with a new numbered migration.
-- __schema__ is replaced by the quoted schema name when the file is loaded.

CREATE SCHEMA IF NOT EXISTS __schema__;

CREATE TYPE __schema__.job_state AS ENUM ('scheduled', 'pending', 'running', 'waiting', 'succeeded', 'dead', 'cancelled');

CREATE TABLE __schema__.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text NOT NULL,
    task             text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    state            __schema__.job_state NOT NULL DEFAULT 'pending',
    priority         smallint NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT now(),
    attempt_count    integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 20,
    lease_owner      text,
    lease_token      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    lease_deadline   timestamptz,
    progress         jsonb,
    last_error_code  text,
    last_error       text,
    idempotency_key  uuid NOT NULL DEFAULT overlay(gen_random_uuid()::text PLACING '8' FROM 15 FOR 1)::uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finished_at      timestamptz,
    ordering_key     text,
    result           jsonb,
    result_wanted    boolean NOT NULL DEFAULT false,
    snoozes          integer NOT NULL DEFAULT 0,
    unique_key       text,
    unique_states    __schema__.job_state[],
    trace_context    jsonb,
    -- Every CHECK is evaluated on every write of a row, claim and completion included: each is
    -- written to cost little (a bounded repetition, {0,62}, cost 1.5 us a row; migration 0028).
    CONSTRAINT jobs_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' AND octet_length(queue) <= 63),
    CONSTRAINT jobs_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT jobs_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT jobs_attempts_in_budget CHECK (max_attempts >= 1 AND attempt_count BETWEEN 0 AND max_attempts),
    CONSTRAINT jobs_waiting_has_budget CHECK (state NOT IN ('scheduled', 'pending') OR attempt_count < max_attempts),
    CONSTRAINT jobs_token_counts_claims CHECK (lease_token >= attempt_count),
    CONSTRAINT jobs_running_has_lease CHECK (
        (state = 'running') = (lease_owner IS NOT NULL)
        AND (state = 'running') = (lease_expires_at IS NOT NULL)
        AND (state = 'running') = (lease_deadline IS NOT NULL)
    ),
    CONSTRAINT jobs_running_was_claimed CHECK (
        state <> 'running' OR (lease_token >= 1 AND attempt_count >= 1 AND attempted_at IS NOT NULL)
    ),
    CONSTRAINT jobs_finished_iff_terminal CHECK (
        (state IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL)
    ),
    CONSTRAINT jobs_error_bounded CHECK (char_length(last_error) <= 2000 AND char_length(last_error_code) <= 100),
    CONSTRAINT jobs_ordering_key_length CHECK (char_length(ordering_key) BETWEEN 1 AND 200)
);
-- NOT VALID as migration 0014 adds it (it checks new rows only, sparing a scan of a large
-- table), so that a fresh schema and an upgraded one are the same.
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_trace_context_bounded CHECK (
    trace_context IS NULL
    OR (jsonb_typeof(trace_context) = 'object' AND octet_length(trace_context::text) <= 2048)
) NOT VALID;

-- Values every worker can read and run (migration 0015): run and creation times a client can
-- load, an attempt budget within the client's bound, and a unique key of the job's own task.
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_times_in_range CHECK (
    available_at >= '1900-01-01 00:00:00+00' AND available_at < '9000-01-01 00:00:00+00'
    AND created_at >= '1900-01-01 00:00:00+00' AND created_at < '9000-01-01 00:00:00+00'
);
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_attempts_bounded CHECK (max_attempts <= 1000);
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_unique_key_of_its_task CHECK (
    unique_key IS NULL OR starts_with(unique_key, task || ':')
);

-- Matches the claim's ORDER BY exactly, so the claim is an ordered index scan at any backlog.
-- Only due jobs are pending: jobs waiting for a later run time are `scheduled`, outside it.
CREATE INDEX jobs_claimable_idx ON __schema__.jobs (queue, priority DESC, available_at, id)
    WHERE state = 'pending';
-- The claim's oldest-first share: a queue's due jobs by age, whatever their priority.
CREATE INDEX jobs_claimable_by_age_idx ON __schema__.jobs (queue, available_at, id)
    WHERE state = 'pending';
-- Promotion takes due scheduled jobs earliest first; `queue` rides along so the gauges can count
-- scheduled jobs per queue from the index alone.
CREATE INDEX jobs_scheduled_idx ON __schema__.jobs (available_at) INCLUDE (queue)
    WHERE state = 'scheduled';
CREATE INDEX jobs_running_expiry_idx ON __schema__.jobs (lease_expires_at)
    WHERE state = 'running';
CREATE INDEX jobs_dead_idx ON __schema__.jobs (queue, finished_at)
    WHERE state = 'dead';
-- One job per idempotency key a caller chose (migrations 0006, 0023). Keys Tenure generates are
-- random UUIDs of version 8 (tenure/model/keys.py), left out, so that a job nobody keyed writes
-- no entry here at each transition.
CREATE UNIQUE INDEX jobs_chosen_idempotency_key_idx ON __schema__.jobs (idempotency_key)
    WHERE substr(idempotency_key::text, 15, 1) <> '8';

-- Append-only history of every transition off the happy path.
CREATE TABLE __schema__.job_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint NOT NULL,
    event      text NOT NULL,
    from_state __schema__.job_state,
    to_state   __schema__.job_state,
    token      bigint NOT NULL,
    worker     text,
    error_code text,
    error      text,
    at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_events_error_bounded CHECK (char_length(error) <= 2000 AND char_length(error_code) <= 100)
);
CREATE INDEX job_events_job_idx ON __schema__.job_events (job_id, id);
-- NOT VALID, as the service-health migration adds it (a test proves the two schemas equal).
ALTER TABLE __schema__.job_events ADD CONSTRAINT job_events_event_known CHECK (event IN (
    'retry', 'lease_expired', 'fencing_lost', 'dead', 'released', 'reprocess', 'cancel', 'lease_lost',
    'revoke', 'snooze', 'retry_now', 'wait', 'signalled', 'wait_timeout', 'wait_ended'
)) NOT VALID;

-- The claim's "is this the head of its key?" probe, and the operators' blocked-key listing.
CREATE INDEX jobs_ordering_idx ON __schema__.jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'dead');

-- One row per named external effect of a job: intent before the call, outcome after it.
CREATE TABLE __schema__.job_effects (
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
CREATE INDEX job_effects_uncertain_idx ON __schema__.job_effects (updated_at) WHERE state = 'uncertain';


-- Every job row is updated several times (claim, heartbeats, completion) and then deleted by
-- retention, so the table is mostly dead tuples in waiting. The default autovacuum trigger (20%
-- of the table) lets millions of them pile up in a large table and the partial indexes the claim
-- scans; vacuum after 1% instead. fillfactor leaves room on each page so an updated row's new
-- version usually lands on the same page (one dirty page per transition, not two).
ALTER TABLE __schema__.jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- Retention deletes the oldest finished jobs first, and `tenure status` counts recent ones.
CREATE INDEX jobs_finished_idx ON __schema__.jobs (finished_at)
    WHERE state IN ('succeeded', 'cancelled');
-- Retention of the audit log, oldest first.
CREATE INDEX job_events_at_idx ON __schema__.job_events (at);

-- One row per running worker process, refreshed every few seconds and deleted at a clean
-- shutdown: a row that stops being refreshed is a worker that died or hangs.
CREATE TABLE __schema__.workers (
    id          text PRIMARY KEY,
    queues      text[] NOT NULL,
    concurrency integer NOT NULL,
    busy        integer NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    failing     jsonb,
    -- The tasks it registered (migration 0021); NULL: a worker of an earlier version, which
    -- counts as running every task of its queues.
    tasks       text[],
    CONSTRAINT workers_id_length CHECK (char_length(id) BETWEEN 1 AND 200),
    CONSTRAINT workers_busy_in_range CHECK (concurrency >= 1 AND busy BETWEEN 0 AND concurrency)
);

-- Job control (migration 0009): results, snoozes, queue pauses and their history.
-- NOT VALID, as migration 0009 adds them (a test proves the two schemas equal).
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_result_when_succeeded
    CHECK (result IS NULL OR state = 'succeeded') NOT VALID;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_snoozes_counted CHECK (snoozes >= 0) NOT VALID;

CREATE TABLE __schema__.queue_pauses (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    until     timestamptz,
    actor     text NOT NULL,
    reason    text NOT NULL,
    CONSTRAINT queue_pauses_reason_bounded CHECK (char_length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT queue_pauses_actor_bounded CHECK (char_length(actor) BETWEEN 1 AND 200),
    CONSTRAINT queue_pauses_until_later CHECK (until IS NULL OR until > paused_at)
);

CREATE TABLE __schema__.queue_events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text NOT NULL,
    event  text NOT NULL,
    until  timestamptz,
    actor  text NOT NULL,
    reason text,
    at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_events_event_known CHECK (event IN ('pause', 'resume')),
    CONSTRAINT queue_events_reason_bounded CHECK (char_length(reason) <= 2000)
);
CREATE INDEX queue_events_queue_idx ON __schema__.queue_events (queue, id);

-- Cancelling is an operator's act. The worker role may write a job's state (it must, to claim
-- and complete), so a column privilege cannot keep it from writing 'cancelled'; this trigger
-- can: only a role that may also pause queues may cancel. It fires only on that one transition.
-- It checks the caller's privilege (it must not run as its owner), under a path nobody can put a
-- function ahead of (migration 0019). A cancelled waiting job's wait ends with it (0025).
CREATE FUNCTION __schema__.jobs_cancel_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT pg_catalog.has_table_privilege(pg_catalog.format('%I.queue_pauses', TG_TABLE_SCHEMA), 'INSERT') THEN
        RAISE EXCEPTION 'role % may not cancel jobs', current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel and revoke as the admin role (see tenure roles)';
    END IF;
    IF OLD.state = 'waiting' THEN
        UPDATE __schema__.job_waits
        SET state = 'cancelled', resolved_at = pg_catalog.statement_timestamp(), swept = true
        WHERE job_id = OLD.id AND state = 'waiting';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_cancel_guard BEFORE UPDATE OF state ON __schema__.jobs
    FOR EACH ROW WHEN (NEW.state = 'cancelled' AND OLD.state IS DISTINCT FROM 'cancelled')
    EXECUTE FUNCTION __schema__.jobs_cancel_guard();

-- Unique jobs (migrations 0011, 0012): a key held while the job is in one of its unique_states.
-- A cancelled job never holds its key, whatever its scope (migration 0019): a cancel frees it.
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_unique_scope CHECK (
    (unique_key IS NULL) = (unique_states IS NULL)
    AND (unique_key IS NULL OR (unique_states @> ARRAY['scheduled', 'pending', 'running']::__schema__.job_state[]
                                AND NOT unique_states @> ARRAY['cancelled']::__schema__.job_state[]
                                AND char_length(unique_key) BETWEEN 1 AND 500))
);
CREATE UNIQUE INDEX jobs_unique_key_idx ON __schema__.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state = ANY(unique_states);

-- Which job an enqueue met, for a key the caller already knows. The producer role reads no
-- idempotency keys, payloads or unique keys (they quote the payload); these answer only for the
-- one key given, so a producer learns the id of its own earlier job and nothing else.
CREATE FUNCTION __schema__.job_by_idempotency_key(key uuid)
RETURNS TABLE (id bigint, available_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT j.id, j.available_at FROM __schema__.jobs j
      WHERE j.idempotency_key = key AND substr(j.idempotency_key::text, 15, 1) <> '8' $$;

CREATE FUNCTION __schema__.job_holding_unique_key(key text)
RETURNS TABLE (id bigint, available_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT j.id, j.available_at FROM __schema__.jobs j
      WHERE j.unique_key = key AND j.state = ANY(j.unique_states) $$;

REVOKE ALL ON FUNCTION __schema__.job_by_idempotency_key(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION __schema__.job_holding_unique_key(text) FROM PUBLIC;

-- Global limits (migration 0013): see that migration for what each column bounds.
CREATE TABLE __schema__.queue_limits (
    queue               text PRIMARY KEY,
    max_running         integer,
    key_field           text,
    max_running_per_key integer,
    rate                integer,
    per_seconds         float8,
    tokens              float8,
    refilled_at         timestamptz,
    declared_by         text NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_limits_running_positive CHECK (max_running IS NULL OR max_running >= 1),
    CONSTRAINT queue_limits_per_key CHECK (
        (key_field IS NULL) = (max_running_per_key IS NULL)
        AND (max_running_per_key IS NULL OR max_running_per_key >= 1)
        AND (key_field IS NULL OR char_length(key_field) BETWEEN 1 AND 200)
    ),
    CONSTRAINT queue_limits_rate CHECK (
        (rate IS NULL) = (per_seconds IS NULL)
        AND (rate IS NULL OR (rate >= 1 AND per_seconds > 0 AND tokens IS NOT NULL AND refilled_at IS NOT NULL))
    ),
    CONSTRAINT queue_limits_something CHECK (
        max_running IS NOT NULL OR key_field IS NOT NULL OR rate IS NOT NULL
    )
);
-- Periodic jobs (migration 0010, docs/schedules.md): declared schedules and their fired slots.
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
    -- The last resume (migration 0016): kept as the pause is, until the next resume.
    resumed_at      timestamptz,
    resumed_by      text,
    resume_reason   text,
    CONSTRAINT schedules_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT schedules_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT schedules_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' AND octet_length(queue) <= 63),
    CONSTRAINT schedules_cron_length CHECK (char_length(cron) BETWEEN 1 AND 200),
    CONSTRAINT schedules_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT schedules_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT schedules_missed_known CHECK (missed ~ '^(skip|latest|backfill:[1-9][0-9]{0,3})$'),
    CONSTRAINT schedules_fired_before_last CHECK (last_fired_slot IS NULL OR last_fired_slot <= last_slot),
    CONSTRAINT schedules_pause_recorded CHECK (
        (paused AND paused_at IS NOT NULL AND paused_by IS NOT NULL AND pause_reason IS NOT NULL)
        OR (NOT paused AND paused_at IS NULL AND paused_by IS NULL AND pause_reason IS NULL)),
    CONSTRAINT schedules_pause_bounded CHECK (
        char_length(pause_reason) BETWEEN 1 AND 2000 AND char_length(paused_by) BETWEEN 1 AND 200),
    CONSTRAINT schedules_resume_recorded CHECK (
        (resumed_at IS NULL) = (resumed_by IS NULL) AND (resume_reason IS NULL OR resumed_at IS NOT NULL)),
    CONSTRAINT schedules_resume_bounded CHECK (
        char_length(resumed_by) BETWEEN 1 AND 200 AND char_length(resume_reason) BETWEEN 1 AND 2000)
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

-- The guarded way in (migration 0017, docs/sql.md): the task catalog workers declare, and
-- enqueue(), which completes and checks a job as the Python client does.
CREATE TABLE __schema__.task_policies (
    task          text PRIMARY KEY,
    queue         text NOT NULL,
    priority      smallint NOT NULL,
    max_attempts  integer NOT NULL,
    unique_fields text[],
    unique_whole  boolean NOT NULL DEFAULT false,
    unique_states __schema__.job_state[],
    unique_period float8,
    declared_by   text NOT NULL,
    declared_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_policies_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT task_policies_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' AND octet_length(queue) <= 63),
    CONSTRAINT task_policies_attempts CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT task_policies_unique CHECK (
        (unique_states IS NULL) = NOT (unique_whole OR unique_fields IS NOT NULL)
        AND NOT (unique_whole AND unique_fields IS NOT NULL)
        AND (unique_period IS NULL OR unique_period > 0)),
    -- The scopes a job takes (jobs_unique_scope), so a declared policy never fails its every enqueue.
    CONSTRAINT task_policies_unique_scope CHECK (
        unique_states IS NULL
        OR (unique_states @> ARRAY['scheduled', 'pending', 'running']::__schema__.job_state[]
            AND NOT unique_states @> ARRAY['cancelled']::__schema__.job_state[])),
    CONSTRAINT task_policies_declared_by_length CHECK (char_length(declared_by) BETWEEN 1 AND 200)
);

-- The key part of a job unique by payload fields (all of them when `fields` is NULL), exactly as
-- the Python client writes it (tenure.model.unique): compact JSON, keys in code point order. Values
-- that two JSON writers could spell differently (objects, arrays, non-integer numbers) are
-- refused with the fix instead of risking a key the client would not match.
CREATE FUNCTION __schema__.unique_part(payload jsonb, fields text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k text;
    v jsonb;
    parts text[] := '{}';
BEGIN
    IF fields IS NOT NULL AND NOT payload ?& fields THEN
        RAISE EXCEPTION 'the job is unique by payload fields %, and the payload lacks some of them', fields
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'include every one of those fields, or give unique_key => ''...''';
    END IF;
    FOR k, v IN
        SELECT e.key, e.value FROM jsonb_each(payload) e
        WHERE fields IS NULL OR e.key = ANY(fields)
        ORDER BY e.key COLLATE "C"
    LOOP
        IF jsonb_typeof(v) IN ('object', 'array')
           OR (jsonb_typeof(v) = 'number' AND v::text !~ '^-?[0-9]+$') THEN
            RAISE EXCEPTION 'payload field % decides the job''s unique key, and its value % is an object, '
                            'a list or a fraction, which SQL cannot spell as the Python client does', k, v
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'give the key yourself: unique_key => ''...''';
        END IF;
        parts := parts || (to_jsonb(k)::text || ':' || v::text);
    END LOOP;
    RETURN '{' || array_to_string(parts, ',') || '}';
END
$$;

-- The key a job of `task` holds for key part `part`: scoped to its task, a digest when long
-- (tenure.model.unique.held_key).
CREATE FUNCTION __schema__.unique_held_key(task text, part text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN char_length(task || ':' || part) > 400
                THEN left(task, 200) || ':sha256:' || encode(sha256(convert_to(part, 'UTF8')), 'hex')
                ELSE task || ':' || part END
$$;

-- The queue, priority and attempt budget of a job of `task` with `payload`, for every way a job
-- comes in through the database (enqueue(), and each step of enqueue_workflow()): what the caller
-- gave, else the task's declared `policy`, else Tenure's defaults, each checked against the bound
-- the Python client applies (tenure.model.validation), so a caller who goes round the client gets
-- no more than it would. `subject` names a workflow's step in the errors.
CREATE FUNCTION __schema__.enqueue_options(
    policy __schema__.task_policies, task text, payload jsonb, queue text, priority numeric, max_attempts numeric,
    subject text DEFAULT NULL, OUT job_queue text, OUT job_priority smallint, OUT job_max_attempts integer)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    what text := coalesce(' (' || subject || ')', '');
    size bigint;
BEGIN
    IF task IS NULL OR char_length(task) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('task must name a task in 1 to 200 characters, got %s%s',
                             coalesce(quote_literal(task), 'NULL'), what),
            HINT = 'give the name the task is registered under, for example ''emails.send_receipt''';
    END IF;
    IF payload IS NULL OR jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('payload must be a JSON object, got %s%s', coalesce(jsonb_typeof(payload), 'NULL'), what),
            HINT = 'for example ''{"order_id": 42}''::jsonb';
    END IF;
    -- Measured on jsonb's own text (a space after each ':' and ','), the client on compact JSON.
    size := octet_length(payload::text);
    IF size > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('payload of task %s is %s bytes, over the limit of 1048576%s', quote_literal(task),
                             size, what),
            HINT = 'store large data elsewhere and enqueue a reference to it';
    END IF;
    job_queue := coalesce(queue, policy.queue, 'default');
    IF job_queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('queue name %s is invalid%s', quote_literal(job_queue), what),
            HINT = 'use 1-63 letters, digits or ''_.:-'', starting with a letter or digit (for example '
                   '''emails'' or ''billing.v2''), or leave it out for the task''s own queue';
    END IF;
    IF priority IS NOT NULL AND NOT (priority = trunc(priority) AND priority BETWEEN -32768 AND 32767) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('priority %s is out of range: give an integer from -32768 to 32767%s', priority, what),
            HINT = 'higher runs first; leave it out for the task''s own priority';
    END IF;
    job_priority := coalesce(priority, policy.priority, 0);
    IF max_attempts IS NOT NULL AND NOT (max_attempts = trunc(max_attempts) AND max_attempts BETWEEN 1 AND 1000) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('max_attempts %s is invalid: give an integer from 1 to 1000%s', max_attempts, what),
            HINT = 'leave it out for the task''s own budget';
    END IF;
    job_max_attempts := coalesce(max_attempts, policy.max_attempts, 20);
END
$$;
REVOKE ALL ON FUNCTION __schema__.enqueue_options(__schema__.task_policies, text, jsonb, text, numeric, numeric, text)
    FROM PUBLIC;

CREATE FUNCTION __schema__.enqueue(
    task text,
    payload jsonb DEFAULT '{}',
    queue text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    delay_seconds float8 DEFAULT NULL,
    priority integer DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    ordering_key text DEFAULT NULL,
    idempotency_key uuid DEFAULT NULL,
    unique_key text DEFAULT NULL,
    unique_states __schema__.job_state[] DEFAULT NULL,
    unique_period_seconds float8 DEFAULT NULL,
    result_wanted boolean DEFAULT false,
    trace_context jsonb DEFAULT NULL,
    notify boolean DEFAULT true
) RETURNS TABLE (id bigint, available_at timestamptz, existing boolean, scheduled boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    policy __schema__.task_policies;
    t_now timestamptz := now();
    at timestamptz;
    part text := unique_key;
    held text;
    states __schema__.job_state[];
    period float8;
    new_id bigint;
    new_at timestamptz;
    space text := 'tenure.ordering:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                        ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass);
BEGIN
    SELECT * INTO policy FROM __schema__.task_policies p WHERE p.task = enqueue.task;
    SELECT o.job_queue, o.job_priority, o.job_max_attempts INTO queue, priority, max_attempts
    FROM __schema__.enqueue_options(policy, task, payload, queue, priority, max_attempts) o;
    IF run_at IS NOT NULL AND delay_seconds IS NOT NULL THEN
        RAISE EXCEPTION 'give either run_at or delay_seconds, not both' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delay_seconds IS NOT NULL AND NOT (delay_seconds >= 0 AND delay_seconds <= 3162240000) THEN
        RAISE EXCEPTION 'delay_seconds % is invalid: give seconds from 0 to about 100 years', delay_seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF substr(idempotency_key::text, 15, 1) = '8' THEN
        -- The form of the keys Tenure generates, which no index keeps unique: a caller who could
        -- give one could give a job another job's key (docs/security.md).
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('idempotency_key %s is a version 8 UUID, the form of the keys Tenure generates '
                             'for jobs without one, which the database does not keep unique', idempotency_key),
            HINT = 'leave it out for a generated key, or give a UUID of another version';
    END IF;
    at := coalesce(run_at, t_now + make_interval(secs => coalesce(delay_seconds, 0)));
    IF NOT (at >= '1900-01-01 00:00:00+00' AND at < '9000-01-01 00:00:00+00') THEN
        RAISE EXCEPTION 'run_at % is out of range: give a time from 1900 up to 9000', at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF part IS NULL AND (policy.unique_whole OR policy.unique_fields IS NOT NULL) THEN
        part := __schema__.unique_part(payload, policy.unique_fields);
    END IF;
    IF part IS NOT NULL THEN
        IF char_length(part) = 0 THEN
            RAISE EXCEPTION 'unique_key must not be empty' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        held := __schema__.unique_held_key(task, part);
        states := coalesce(unique_states, policy.unique_states, '{scheduled,pending,running}');
        -- A job holds its task's key only as the task declares (docs/security.md): a caller may
        -- narrow the scope, never widen it, and no scope holds a cancelled job's key, so an
        -- operator's cancel always frees it.
        IF 'cancelled' = ANY(states) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'unique_states may not include cancelled: a cancelled job never holds its key, so an '
                          'operator''s cancel frees it',
                HINT = 'leave cancelled out of unique_states';
        END IF;
        IF NOT states @> '{scheduled,pending,running}' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('unique_states %s must include scheduled, pending and running: a job holds its '
                                 'key from enqueue until it stops running', states),
                HINT = 'add them, or leave unique_states out for the task''s own scope';
        END IF;
        IF NOT states <@ coalesce(policy.unique_states, '{scheduled,pending,running}') THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('unique_states %s reach beyond the scope task %s declares, %s', states,
                                 quote_literal(task), coalesce(policy.unique_states, '{scheduled,pending,running}')),
                HINT = 'leave unique_states out for the task''s own scope, or widen the scope where the task is '
                       'declared (tenure.Unique(scope=...)) and restart its workers';
        END IF;
        period := coalesce(unique_period_seconds, policy.unique_period);
        IF period IS NOT NULL THEN
            IF NOT period > 0 THEN
                RAISE EXCEPTION 'unique_period_seconds must be positive, got %', period
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            held := held || '@' || floor(extract(epoch FROM t_now) / period)::bigint;
        END IF;
    ELSIF unique_states IS NOT NULL OR unique_period_seconds IS NOT NULL THEN
        RAISE EXCEPTION 'unique_states and unique_period_seconds go with a unique key'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'give unique_key => ''...'' too';
    END IF;
    IF ordering_key IS NOT NULL THEN
        -- The ids of one key are drawn in commit order, as the client's enqueue draws them.
        PERFORM pg_advisory_xact_lock(hashtext(space), hashtext(ordering_key));
    END IF;
    FOR try_number IN 1..5 LOOP
        INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts,
                                     created_at, ordering_key, idempotency_key, result_wanted, unique_key,
                                     unique_states, trace_context)
        VALUES (queue, task, payload, priority, at,
                CASE WHEN at > t_now THEN 'scheduled' ELSE 'pending' END::__schema__.job_state,
                max_attempts, t_now, ordering_key, coalesce(idempotency_key, overlay(gen_random_uuid()::text PLACING '8' FROM 15 FOR 1)::uuid),
                coalesce(result_wanted, false), held, CASE WHEN held IS NOT NULL THEN states END,
                trace_context)
        ON CONFLICT DO NOTHING
        RETURNING jobs.id, jobs.available_at INTO new_id, new_at;
        IF new_id IS NOT NULL THEN
            IF notify THEN
                PERFORM pg_notify(left('tenure:' || substr(space, 17), 63),
                                  CASE WHEN new_at > t_now THEN '*' || extract(epoch FROM new_at)::text
                                       ELSE queue END);
            END IF;
            RETURN QUERY SELECT new_id, new_at, false, new_at > t_now;
            RETURN;
        END IF;
        -- Kept out by a stored job: the one with this idempotency key, else the one holding the key.
        RETURN QUERY
            SELECT j.id, j.available_at, true, j.state = 'scheduled' FROM __schema__.jobs j
            WHERE j.idempotency_key = enqueue.idempotency_key AND substr(j.idempotency_key::text, 15, 1) <> '8'
            UNION ALL
            (SELECT j.id, j.available_at, true, j.state = 'scheduled' FROM __schema__.jobs j
             WHERE j.unique_key = held AND j.state = ANY(j.unique_states) LIMIT 1)
            LIMIT 1;
        IF FOUND THEN
            RETURN;
        END IF;
        -- The holder finished between the insert and the look-up: try again.
    END LOOP;
    RAISE EXCEPTION 'the unique key % was held at each insert and free at each look-up, 5 times over', held
        USING ERRCODE = 'serialization_failure', HINT = 'try the enqueue again';
END
$$;

-- Nobody may call the definer function unless granted (tenure roles grants it to the producer
-- and worker roles); PostgreSQL grants EXECUTE on a new function to PUBLIC otherwise.
REVOKE ALL ON FUNCTION __schema__.enqueue(text, jsonb, text, timestamptz, float8, integer, integer, text, uuid,
                                          text, __schema__.job_state[], float8, boolean, jsonb, boolean)
    FROM PUBLIC;

-- Workflows (migration 0018, docs/workflows.md): steps that are jobs, released by their
-- parents' fenced completions. See that migration for the why of each object.
ALTER TABLE __schema__.jobs
    ADD COLUMN workflow_id bigint,
    ADD COLUMN workflow_step text;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_workflow_step_named CHECK (
    (workflow_id IS NULL) = (workflow_step IS NULL)
) NOT VALID;

CREATE TABLE __schema__.workflows (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL,
    on_dead      text NOT NULL DEFAULT 'hold',
    created_at   timestamptz NOT NULL DEFAULT now(),
    cancelled_at timestamptz,
    cancelled_by text,
    cancel_reason text,
    CONSTRAINT workflows_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT workflows_on_dead_known CHECK (on_dead IN ('hold', 'cancel')),
    CONSTRAINT workflows_cancel_recorded CHECK (
        (cancelled_at IS NULL) = (cancelled_by IS NULL) AND (cancelled_at IS NULL) = (cancel_reason IS NULL)
        AND char_length(cancelled_by) BETWEEN 1 AND 200 AND char_length(cancel_reason) BETWEEN 1 AND 2000)
);
CREATE INDEX workflows_created_idx ON __schema__.workflows (created_at);

-- A step's job columns are checked here as jobs checks them, so that releasing a step can never
-- fail on its values inside a parent's completion (which would cost the parent's whole batch).
-- `remaining` counts the dependencies that have not succeeded yet; the step is released at 0.
-- States: waiting (for dependencies), held (a dependency is dead and the workflow holds),
-- cancelled (will never run), released (its job exists: the job's state is the step's),
-- succeeded and dead (kept here too, so the workflow's history outlives job retention).
CREATE TABLE __schema__.workflow_steps (
    workflow_id   bigint NOT NULL REFERENCES __schema__.workflows (id) ON DELETE CASCADE,
    name          text NOT NULL,
    job_id        bigint NOT NULL,
    task          text NOT NULL,
    queue         text NOT NULL,
    payload       jsonb NOT NULL,
    priority      smallint NOT NULL,
    max_attempts  integer NOT NULL,
    result_wanted boolean NOT NULL DEFAULT false,
    input_arg     text,
    input_kind    text,
    remaining     integer NOT NULL,
    state         text NOT NULL,
    result        jsonb,
    released_at   timestamptz,
    finished_at   timestamptz,
    PRIMARY KEY (workflow_id, name),
    CONSTRAINT workflow_steps_job_unique UNIQUE (job_id),
    CONSTRAINT workflow_steps_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT workflow_steps_task_length CHECK (char_length(task) BETWEEN 1 AND 200),
    CONSTRAINT workflow_steps_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$' AND octet_length(queue) <= 63),
    CONSTRAINT workflow_steps_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT workflow_steps_attempts CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT workflow_steps_input CHECK (
        (input_arg IS NULL) = (input_kind IS NULL)
        AND (input_kind IS NULL OR input_kind IN ('one', 'list'))
        AND (input_arg IS NULL OR char_length(input_arg) BETWEEN 1 AND 200)),
    CONSTRAINT workflow_steps_remaining CHECK (remaining >= 0),
    CONSTRAINT workflow_steps_state_known CHECK (
        state IN ('waiting', 'held', 'cancelled', 'released', 'succeeded', 'dead')),
    CONSTRAINT workflow_steps_released_at_zero CHECK (
        state IN ('waiting', 'held', 'cancelled') OR remaining = 0)
);

-- One row per dependency: `child` waits for `parent`. `position` orders a fan-in's results as the
-- workflow listed its dependencies. Looked up by parent when one completes (its children), and
-- by child when one is released (its inputs).
CREATE TABLE __schema__.workflow_edges (
    workflow_id bigint NOT NULL,
    parent      text NOT NULL,
    child       text NOT NULL,
    position    integer NOT NULL,
    PRIMARY KEY (workflow_id, parent, child),
    FOREIGN KEY (workflow_id, parent) REFERENCES __schema__.workflow_steps (workflow_id, name) ON DELETE CASCADE,
    FOREIGN KEY (workflow_id, child) REFERENCES __schema__.workflow_steps (workflow_id, name) ON DELETE CASCADE
);
CREATE INDEX workflow_edges_child_idx ON __schema__.workflow_edges (workflow_id, child, position);

-- Work that grows with a workflow's size runs outside completions, in chunks (migration 0020).
ALTER TABLE __schema__.workflow_steps ADD COLUMN held_reason text;
ALTER TABLE __schema__.workflow_steps ADD CONSTRAINT workflow_steps_held_reason_length CHECK (
    char_length(held_reason) BETWEEN 1 AND 2000
);

-- What the triggers left for the workflow pass, one row per step and kind:
--   release     the step succeeded: its children, after `after_child` in name order, are counted
--               down (and released at zero), a chunk at a time;
--   propagate   the step's state changed (dead, held, cancelled, or back to waiting): its
--               children after `after_child` follow it, and each child that changed propagates
--               in its turn;
--   materialize the step's dependencies all succeeded but it has too many to gather its input
--               inside a completion: its job is made by the pass.
CREATE TABLE __schema__.workflow_work (
    workflow_id bigint NOT NULL,
    step        text NOT NULL,
    kind        text NOT NULL,
    after_child text NOT NULL DEFAULT '',
    -- The database's clock when queued, whatever time the statement that queued it was told.
    queued_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    PRIMARY KEY (workflow_id, step, kind),
    FOREIGN KEY (workflow_id, step) REFERENCES __schema__.workflow_steps (workflow_id, name) ON DELETE CASCADE,
    CONSTRAINT workflow_work_kind_known CHECK (kind IN ('release', 'propagate', 'materialize'))
);
CREATE INDEX workflow_work_queued_idx ON __schema__.workflow_work (queued_at);

-- How many steps a trigger handles inline before it leaves the rest to the workflow pass.
CREATE FUNCTION __schema__.workflow_inline_limit() RETURNS integer
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT greatest(0, coalesce(nullif(current_setting('tenure.workflow_inline_limit', true), '')::integer, 64))
$$;

-- The largest input a step may receive: its dependencies' results together, as JSON text. 32 MiB,
-- or less where a session sets tenure.workflow_max_input_bytes lower (tests do).
CREATE FUNCTION __schema__.workflow_max_input_bytes() RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT least(33554432, coalesce(nullif(current_setting('tenure.workflow_max_input_bytes', true), '')::bigint,
                                    33554432))
$$;

-- A step whose dependencies have all succeeded (locked by the caller, state 'waiting',
-- remaining 0) becomes its job, with its input gathered from its dependencies' results. Inline
-- (inside a completion), a step with more dependencies than the inline limit is left to the
-- workflow pass instead; an input over its bound holds the step with the reason. Returns the
-- job's queue when a job was made.
CREATE FUNCTION __schema__.workflow_make_job(wf bigint, step text, at timestamptz, inline boolean)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s __schema__.workflow_steps;
    parents bigint;
    input_bytes bigint;
    input jsonb;
BEGIN
    SELECT * INTO s FROM __schema__.workflow_steps st WHERE st.workflow_id = wf AND st.name = step;
    IF NOT FOUND OR s.state <> 'waiting' OR s.remaining <> 0 THEN
        RETURN NULL;
    END IF;
    IF s.input_arg IS NOT NULL THEN
        IF inline THEN
            SELECT count(*) INTO parents FROM (
                SELECT 1 FROM __schema__.workflow_edges e WHERE e.workflow_id = wf AND e.child = step
                LIMIT __schema__.workflow_inline_limit() + 1) p;
            IF parents > __schema__.workflow_inline_limit() THEN
                INSERT INTO __schema__.workflow_work (workflow_id, step, kind)
                VALUES (wf, step, 'materialize') ON CONFLICT DO NOTHING;
                RETURN NULL;
            END IF;
        END IF;
        SELECT coalesce(sum(octet_length(p.result::text)), 0) INTO input_bytes
        FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps p ON p.workflow_id = e.workflow_id AND p.name = e.parent
        WHERE e.workflow_id = wf AND e.child = step;
        IF input_bytes > __schema__.workflow_max_input_bytes() THEN
            UPDATE __schema__.workflow_steps st
            SET state = 'held',
                held_reason = format('INPUT_TOO_LARGE: the results of its dependencies come to %s bytes, and a '
                                     'step''s input is at most %s bytes; return a reference to the data '
                                     '(a path, a key) instead of the data itself',
                                     input_bytes, __schema__.workflow_max_input_bytes())
            WHERE st.workflow_id = wf AND st.name = step;
            PERFORM __schema__.workflow_follow(wf, ARRAY[step], at, __schema__.workflow_inline_limit());
            RETURN NULL;
        END IF;
        SELECT CASE WHEN s.input_kind = 'one' THEN (array_agg(p.result ORDER BY e.position))[1]
                    ELSE coalesce(jsonb_agg(p.result ORDER BY e.position), '[]'::jsonb) END
        INTO input
        FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps p ON p.workflow_id = e.workflow_id AND p.name = e.parent
        WHERE e.workflow_id = wf AND e.child = step;
        s.payload := s.payload || jsonb_build_object(s.input_arg, input);
    END IF;
    INSERT INTO __schema__.jobs (id, queue, task, payload, priority, max_attempts, state, available_at,
                                 created_at, result_wanted, workflow_id, workflow_step)
    OVERRIDING SYSTEM VALUE
    VALUES (s.job_id, s.queue, s.task, s.payload, s.priority, s.max_attempts, 'pending', at, at,
            s.result_wanted, wf, step);
    UPDATE __schema__.workflow_steps st
    SET state = 'released', released_at = at, held_reason = NULL
    WHERE st.workflow_id = wf AND st.name = step;
    DELETE FROM __schema__.workflow_work w
    WHERE w.workflow_id = wf AND w.step = workflow_make_job.step AND w.kind = 'materialize';
    RETURN s.queue;
END
$$;

-- The succeeded step `parent` counts down its children after `after_child` (in name order, the
-- order every writer locks them in), at most `chunk` of them, and each child at zero becomes its
-- job. Returns the last child counted when `chunk` were (there may be more), else NULL, and the
-- queues to wake.
CREATE FUNCTION __schema__.workflow_release_children(
    wf bigint, parent text, after_child text, chunk integer, at timestamptz, inline boolean,
    OUT last_child text, OUT queues text[]
) LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    counted integer;
    ready text[];
    child text;
    queue text;
BEGIN
    queues := '{}';
    WITH locked AS (
        SELECT s.name FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps s ON s.workflow_id = e.workflow_id AND s.name = e.child
        WHERE e.workflow_id = wf AND e.parent = workflow_release_children.parent
          AND e.child > workflow_release_children.after_child
        ORDER BY e.child
        LIMIT chunk
        FOR UPDATE OF s
    ), counted AS (
        UPDATE __schema__.workflow_steps s
        SET remaining = s.remaining - 1
        FROM locked l
        WHERE s.workflow_id = wf AND s.name = l.name
        RETURNING s.name, s.remaining, s.state
    )
    SELECT count(*), max(c.name), array_agg(c.name ORDER BY c.name) FILTER (WHERE c.remaining = 0 AND c.state = 'waiting')
    INTO counted, last_child, ready
    FROM counted c;
    -- Fewer than asked: the last of the children. A chunk of 0 (an inline limit of 0) counts
    -- none and leaves them all to the pass.
    last_child := CASE WHEN counted < chunk THEN NULL ELSE coalesce(last_child, after_child) END;
    FOREACH child IN ARRAY coalesce(ready, '{}') LOOP
        queue := __schema__.workflow_make_job(wf, child, at, inline);
        IF queue IS NOT NULL AND NOT queue = ANY (queues) THEN
            queues := queues || queue;
        END IF;
    END LOOP;
END
$$;

-- The children of `step` after `after_child` (in name order, at most `chunk`) follow its state:
-- a dead or held step holds them (cancels them when its workflow says on_dead = 'cancel'), a
-- cancelled one cancels them, and a step waiting or released again (a reprocess) lets the held
-- ones, and the cancelled ones of a workflow nobody cancelled, wait again. Only steps not yet
-- released change. Returns the children that changed, which follow in their turn, and the last
-- child looked at when `chunk` were (there may be more), else NULL.
CREATE FUNCTION __schema__.workflow_follow_chunk(
    wf bigint, step text, after_child text, chunk integer, at timestamptz,
    OUT last_child text, OUT changed text[]
) LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    source text;
    policy text;
    workflow_cancelled boolean;
    looked integer;
BEGIN
    SELECT s.state INTO source FROM __schema__.workflow_steps s WHERE s.workflow_id = wf AND s.name = step;
    SELECT w.on_dead, w.cancelled_at IS NOT NULL INTO policy, workflow_cancelled
    FROM __schema__.workflows w WHERE w.id = wf;
    WITH locked AS (
        SELECT s.name, s.state FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps s ON s.workflow_id = e.workflow_id AND s.name = e.child
        WHERE e.workflow_id = wf AND e.parent = step AND e.child > after_child
        ORDER BY e.child
        LIMIT chunk
        FOR UPDATE OF s
    ), target AS (
        SELECT l.name,
               CASE WHEN source IN ('dead', 'held') AND l.state IN ('waiting', 'held')
                        THEN CASE WHEN policy = 'hold' THEN 'held' ELSE 'cancelled' END
                    WHEN source = 'cancelled' AND l.state IN ('waiting', 'held') THEN 'cancelled'
                    WHEN source IN ('waiting', 'released')
                         AND (l.state = 'held' OR (l.state = 'cancelled' AND NOT workflow_cancelled))
                        THEN 'waiting'
               END AS state
        FROM locked l
    ), moved AS (
        UPDATE __schema__.workflow_steps s
        SET state = t.state,
            finished_at = CASE WHEN t.state = 'cancelled' THEN at END,
            held_reason = NULL
        FROM target t
        WHERE s.workflow_id = wf AND s.name = t.name AND t.state IS NOT NULL AND s.state <> t.state
        RETURNING s.name
    )
    SELECT (SELECT count(*) FROM locked), (SELECT max(l.name) FROM locked l),
           (SELECT coalesce(array_agg(m.name ORDER BY m.name), '{}') FROM moved m)
    INTO looked, last_child, changed;
    IF looked < chunk THEN
        last_child := NULL;
    END IF;
END
$$;

-- The steps after `steps` follow their new states, generation by generation, for as long as
-- `budget` steps last; a step whose children would overrun it is left to the workflow pass
-- (a 'propagate' row). So a long chain or a wide tree below a dead root costs the statement
-- that killed the root at most `budget` steps, whatever the workflow's size.
CREATE FUNCTION __schema__.workflow_follow(wf bigint, steps text[], at timestamptz, budget integer)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    frontier text[] := steps;
    current text;
    children bigint;
    followed record;
BEGIN
    WHILE cardinality(frontier) > 0 LOOP
        current := frontier[1];
        frontier := frontier[2:];
        SELECT count(*) INTO children FROM (
            SELECT 1 FROM __schema__.workflow_edges e WHERE e.workflow_id = wf AND e.parent = current
            LIMIT budget + 1) c;
        CONTINUE WHEN children = 0;
        IF children > budget THEN
            INSERT INTO __schema__.workflow_work (workflow_id, step, kind)
            VALUES (wf, current, 'propagate')
            ON CONFLICT (workflow_id, step, kind) DO UPDATE SET after_child = '', queued_at = EXCLUDED.queued_at;
            budget := 0;
            CONTINUE;
        END IF;
        budget := budget - children;
        followed := __schema__.workflow_follow_chunk(wf, current, '', budget + children::integer + 1, at);
        frontier := frontier || followed.changed;
    END LOOP;
END
$$;

-- Wakes the workers of `queues` (the claimers listen on the schema's channel), at commit.
CREATE FUNCTION __schema__.workflow_wake(queues text[]) RETURNS void
LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
    SELECT count(pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                              ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63), q))
    FROM unnest(queues) AS q
$$;

-- The one place a step's job moves its workflow on, whichever statement moved the job: a fenced
-- completion, a failure or expiry that made it dead, a cancel, a reprocess. SECURITY DEFINER:
-- the roles that move jobs need no privilege on the workflow tables. What it does inline is
-- bounded by the inline limit (64 steps unless a session sets tenure.workflow_inline_limit); the
-- rest is left to the workflow pass. A step row locked elsewhere is waited for at most 1 s.
-- - succeeded: the step keeps its result; its children are counted down in name order (two
--   completions never wait on each other's children in opposite orders); a child at 0 becomes
--   its job, its input (the results of its dependencies, read after the lock, so every other
--   parent's committed result is seen) in its payload under its input argument.
-- - dead or cancelled: the steps after it are held, or cancelled (see workflow_follow_chunk).
-- - dead or cancelled back to waiting (reprocess): the step is released again, and the steps
--   after it wait again.
CREATE FUNCTION __schema__.workflow_advance() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
DECLARE
    released record;
    at timestamptz := coalesce(NEW.finished_at, statement_timestamp());
BEGIN
    IF NEW.state = 'succeeded' THEN
        UPDATE __schema__.workflow_steps s
        SET state = 'succeeded', result = NEW.result, finished_at = NEW.finished_at
        WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step;
        released := __schema__.workflow_release_children(
            NEW.workflow_id, NEW.workflow_step, '', __schema__.workflow_inline_limit(), at, true);
        IF released.last_child IS NOT NULL THEN
            INSERT INTO __schema__.workflow_work (workflow_id, step, kind, after_child)
            VALUES (NEW.workflow_id, NEW.workflow_step, 'release', released.last_child)
            ON CONFLICT DO NOTHING;
        END IF;
        IF cardinality(released.queues) > 0 THEN
            PERFORM pg_notify(left('tenure:' || TG_TABLE_SCHEMA, 63), q) FROM unnest(released.queues) AS q;
        END IF;
    ELSIF NEW.state IN ('dead', 'cancelled') THEN
        UPDATE __schema__.workflow_steps s
        SET state = NEW.state::text, finished_at = NEW.finished_at
        WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step;
        PERFORM __schema__.workflow_follow(NEW.workflow_id, ARRAY[NEW.workflow_step], at,
                                           __schema__.workflow_inline_limit());
    ELSIF OLD.state IN ('dead', 'cancelled') AND NEW.state IN ('pending', 'scheduled') THEN
        UPDATE __schema__.workflow_steps s
        SET state = 'released', finished_at = NULL
        WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step;
        PERFORM __schema__.workflow_follow(NEW.workflow_id, ARRAY[NEW.workflow_step], at,
                                           __schema__.workflow_inline_limit());
    END IF;
    RETURN NULL;
END
$$;

-- One chunk of the workflow pass: the oldest row of workflow_work no other worker is on, at
-- most `chunk` steps of it, in the caller's transaction. A step row locked elsewhere past 1 s
-- puts the row back for a second instead of failing the pass, so one lock costs only its own
-- workflow. Returns what was done: the row's kind, its workflow and step, whether the row is
-- finished, and 'busy' when it was put back.
CREATE FUNCTION __schema__.workflow_work_run(chunk integer)
RETURNS TABLE (kind text, workflow_id bigint, step text, outcome text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '1s' AS $$
#variable_conflict use_column
DECLARE
    w __schema__.workflow_work;
    at timestamptz := statement_timestamp();  -- the database's own clock, as the rows were queued by
    last text;
    queues text[] := '{}';
    released record;
    followed record;
    queue text;
BEGIN
    SELECT * INTO w FROM __schema__.workflow_work ww
    WHERE ww.queued_at <= at
    ORDER BY ww.queued_at LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    BEGIN
        IF w.kind = 'release' THEN
            released := __schema__.workflow_release_children(w.workflow_id, w.step, w.after_child, chunk, at, true);
            last := released.last_child;
            queues := released.queues;
        ELSIF w.kind = 'propagate' THEN
            followed := __schema__.workflow_follow_chunk(w.workflow_id, w.step, w.after_child, chunk, at);
            last := followed.last_child;
            PERFORM __schema__.workflow_follow(w.workflow_id, followed.changed, at, chunk);
        ELSE
            PERFORM 1 FROM __schema__.workflow_steps s WHERE s.workflow_id = w.workflow_id AND s.name = w.step
            FOR UPDATE;
            queue := __schema__.workflow_make_job(w.workflow_id, w.step, at, false);
            queues := CASE WHEN queue IS NULL THEN '{}' ELSE ARRAY[queue] END;
        END IF;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        UPDATE __schema__.workflow_work ww SET queued_at = at + interval '1 second'
        WHERE ww.workflow_id = w.workflow_id AND ww.step = w.step AND ww.kind = w.kind;
        RETURN QUERY SELECT w.kind, w.workflow_id, w.step, 'busy'::text;
        RETURN;
    END;
    IF last IS NULL THEN
        DELETE FROM __schema__.workflow_work ww
        WHERE ww.workflow_id = w.workflow_id AND ww.step = w.step AND ww.kind = w.kind;
    ELSE
        UPDATE __schema__.workflow_work ww SET after_child = last
        WHERE ww.workflow_id = w.workflow_id AND ww.step = w.step AND ww.kind = w.kind;
    END IF;
    PERFORM __schema__.workflow_wake(queues);
    RETURN QUERY SELECT w.kind, w.workflow_id, w.step, CASE WHEN last IS NULL THEN 'done' ELSE 'more' END;
END
$$;
REVOKE ALL ON FUNCTION __schema__.workflow_work_run(integer) FROM PUBLIC;

-- A retry's way back for steps whose job was purged (`tenure dead purge`, retention's
-- --keep-dead) after it died or was cancelled on its own: each job is made again from its step's
-- row, as its release made it (its input gathered again from its dependencies' results), and the
-- steps after it wait again. Returns the steps remade with their job ids.
CREATE FUNCTION __schema__.workflow_rebuild_purged(wf bigint)
RETURNS TABLE (step text, job_id bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    gone text[];
    name text;
    at timestamptz := statement_timestamp();
BEGIN
    SELECT coalesce(array_agg(s.name ORDER BY s.name), '{}') INTO gone FROM (
        SELECT s.name FROM __schema__.workflow_steps s
        WHERE s.workflow_id = wf AND s.state IN ('dead', 'cancelled') AND s.released_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM __schema__.jobs j WHERE j.id = s.job_id)
        ORDER BY s.name
        FOR UPDATE OF s
    ) s;
    UPDATE __schema__.workflow_steps s SET state = 'waiting', remaining = 0, finished_at = NULL
    WHERE s.workflow_id = wf AND s.name = ANY (gone);
    FOREACH name IN ARRAY gone LOOP
        PERFORM __schema__.workflow_make_job(wf, name, at, false);
    END LOOP;
    PERFORM __schema__.workflow_follow(wf, gone, at, __schema__.workflow_inline_limit());
    RETURN QUERY SELECT s.name, s.job_id FROM __schema__.workflow_steps s
                 WHERE s.workflow_id = wf AND s.name = ANY (gone) ORDER BY s.job_id;
END
$$;
REVOKE ALL ON FUNCTION __schema__.workflow_rebuild_purged(bigint) FROM PUBLIC;

CREATE TRIGGER jobs_workflow_advance AFTER UPDATE OF state ON __schema__.jobs
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
          AND (NEW.state IN ('succeeded', 'dead', 'cancelled') OR OLD.state IN ('dead', 'cancelled')))
    EXECUTE FUNCTION __schema__.workflow_advance();

-- The one way a workflow comes in, for every role that may enqueue (the Python client calls it
-- too): checks the steps, draws every step's job id, writes the workflow, its steps and their
-- dependencies, and makes the steps without dependencies jobs at once, all in the caller's
-- transaction. %(steps)s is a JSON array of objects: name, task, payload, and optionally queue,
-- priority, max_attempts (the task's declared policy, else the defaults, as enqueue() does),
-- result_wanted, after (names of earlier steps), input_arg and input_kind ('one' or 'list').
-- A step may depend only on steps listed before it, which keeps every workflow acyclic.
CREATE FUNCTION __schema__.enqueue_workflow(name text, steps jsonb, on_dead text DEFAULT 'hold')
RETURNS TABLE (workflow_id bigint, step text, job_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    bad text;
    t_now timestamptz := now();
    woken text;
    places jsonb;
BEGIN
    IF name IS NULL OR char_length(name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a workflow needs a name of 1 to 200 characters, got %', coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_dead IS NULL OR on_dead NOT IN ('hold', 'cancel') THEN
        RAISE EXCEPTION 'on_dead must be ''hold'' or ''cancel'', got %', coalesce(quote_literal(on_dead), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'hold keeps the steps after a dead step waiting for its reprocess; cancel cancels them';
    END IF;
    IF steps IS NULL OR jsonb_typeof(steps) <> 'array' OR jsonb_array_length(steps) = 0 THEN
        RAISE EXCEPTION 'a workflow needs its steps as a non-empty JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_array_length(steps) > 100000 THEN
        RAISE EXCEPTION 'a workflow has at most 100000 steps, this one has %', jsonb_array_length(steps)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'split the work into several workflows';
    END IF;
    SELECT s.value::text INTO bad FROM jsonb_array_elements(steps) s
    WHERE jsonb_typeof(s.value) <> 'object' OR jsonb_typeof(s.value -> 'name') IS DISTINCT FROM 'string'
       OR jsonb_typeof(s.value -> 'task') IS DISTINCT FROM 'string'
       OR jsonb_typeof(coalesce(s.value -> 'payload', '{}')) <> 'object'
       OR jsonb_typeof(coalesce(s.value -> 'after', '[]')) <> 'array'
       OR jsonb_typeof(coalesce(s.value -> 'queue', '"q"')) <> 'string'
       OR jsonb_typeof(coalesce(s.value -> 'priority', '0')) <> 'number'
       OR jsonb_typeof(coalesce(s.value -> 'max_attempts', '1')) <> 'number'
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'a workflow step must be an object with a name and a task (strings), a payload object, '
                        'an after array, and a queue (a string), a priority and max_attempts (numbers) when '
                        'given, got %', left(bad, 200)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.value ->> 'name' INTO bad FROM jsonb_array_elements(steps) s
    GROUP BY s.value ->> 'name' HAVING count(*) > 1 LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'two steps of the workflow are named %', quote_literal(bad)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'give each step its own name';
    END IF;
    -- Each step's place, looked up by name in one JSON object: a join of the steps with
    -- themselves here, under LIMIT 1, can be planned as a nested loop, which a fan-out of
    -- 100,000 turns into 10^10 comparisons.
    SELECT jsonb_object_agg(s.value ->> 'name', s.n) INTO places
    FROM jsonb_array_elements(steps) WITH ORDINALITY s(value, n);
    SELECT format('step %s depends on %s, which is not listed before it', quote_literal(c.value ->> 'name'),
                  quote_literal(a.parent)) INTO bad
    FROM jsonb_array_elements(steps) WITH ORDINALITY c(value, n)
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(c.value -> 'after', '[]')) a(parent)
    WHERE (places ->> a.parent) IS NULL OR (places ->> a.parent)::bigint >= c.n
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value',
            HINT = 'list each step after the steps it depends on (a workflow has no cycles)';
    END IF;

    INSERT INTO __schema__.workflows (name, on_dead, created_at)
    VALUES (enqueue_workflow.name, enqueue_workflow.on_dead, t_now)
    RETURNING id INTO new_id;
    INSERT INTO __schema__.workflow_steps (workflow_id, name, job_id, task, queue, payload, priority, max_attempts,
                                           result_wanted, input_arg, input_kind, remaining, state, released_at)
    SELECT new_id, s.value ->> 'name', nextval(pg_get_serial_sequence('__schema__.jobs', 'id')), s.value ->> 'task',
           o.job_queue, coalesce(s.value -> 'payload', '{}'), o.job_priority, o.job_max_attempts,
           coalesce((s.value ->> 'result_wanted')::boolean, false),
           s.value ->> 'input_arg', s.value ->> 'input_kind',
           coalesce(jsonb_array_length(s.value -> 'after'), 0),
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN 'released' ELSE 'waiting' END,
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN t_now END
    FROM jsonb_array_elements(steps) WITH ORDINALITY s(value, n)
    LEFT JOIN __schema__.task_policies p ON p.task = s.value ->> 'task'
    CROSS JOIN LATERAL __schema__.enqueue_options(
        p, s.value ->> 'task', coalesce(s.value -> 'payload', '{}'), s.value ->> 'queue',
        (s.value ->> 'priority')::numeric, (s.value ->> 'max_attempts')::numeric,
        format('step %s', quote_literal(s.value ->> 'name'))) o
    ORDER BY s.n;
    INSERT INTO __schema__.workflow_edges (workflow_id, parent, child, position)
    SELECT new_id, a.parent, c.value ->> 'name', a.n
    FROM jsonb_array_elements(steps) c(value)
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(c.value -> 'after', '[]')) WITH ORDINALITY a(parent, n);
    WITH roots AS (
        INSERT INTO __schema__.jobs (id, queue, task, payload, priority, max_attempts, state, available_at,
                                     created_at, result_wanted, workflow_id, workflow_step)
        OVERRIDING SYSTEM VALUE
        SELECT s.job_id, s.queue, s.task, s.payload, s.priority, s.max_attempts, 'pending', t_now, t_now,
               s.result_wanted, s.workflow_id, s.name
        FROM __schema__.workflow_steps s
        WHERE s.workflow_id = new_id AND s.remaining = 0
        ORDER BY s.job_id
        RETURNING jobs.queue
    )
    SELECT string_agg(DISTINCT r.queue, ',') INTO woken FROM roots r;
    PERFORM pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                          ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63), q)
    FROM unnest(string_to_array(woken, ',')) AS q;
    RETURN QUERY SELECT new_id, s.name, s.job_id FROM __schema__.workflow_steps s
                 WHERE s.workflow_id = new_id ORDER BY s.job_id;
END
$$;
REVOKE ALL ON FUNCTION __schema__.enqueue_workflow(text, jsonb, text) FROM PUBLIC;

-- Waits and signals (docs/waits.md): a waiting job's row in job_waits, the mailbox of signals,
-- and the functions that send, deliver and sweep them.
CREATE TABLE __schema__.signals (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key             text NOT NULL,
    payload         jsonb NOT NULL DEFAULT 'null',
    -- A second signal to the same key with the same idempotency key is the first one, while the
    -- first is kept.
    idempotency_key text,
    sent_at         timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- Undelivered past this, it is dropped (and counted in signal_totals).
    expires_at      timestamptz NOT NULL,
    sent_by         text NOT NULL DEFAULT session_user,
    -- The job it was delivered to, and when; NULL while it is in the mailbox.
    job_id          bigint REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    delivered_at    timestamptz,
    -- Looked at by the recovery pass (or delivered at once): no race can have left it unmatched.
    swept           boolean NOT NULL DEFAULT false,
    CONSTRAINT signals_key_length CHECK (char_length(key) BETWEEN 1 AND 400),
    CONSTRAINT signals_idempotency_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    CONSTRAINT signals_payload_size CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT signals_delivered CHECK ((job_id IS NULL) = (delivered_at IS NULL))
);
CREATE UNIQUE INDEX signals_idempotency_key_idx ON __schema__.signals (key, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The mailbox: undelivered signals of a key, oldest first.
CREATE INDEX signals_mailbox_idx ON __schema__.signals (key, id) WHERE job_id IS NULL;
CREATE INDEX signals_expiry_idx ON __schema__.signals (expires_at) WHERE job_id IS NULL;
CREATE INDEX signals_unswept_idx ON __schema__.signals (id) WHERE NOT swept;
-- For a job's own signals, and for the cascade when a finished job is pruned.
CREATE INDEX signals_job_idx ON __schema__.signals (job_id) WHERE job_id IS NOT NULL;

-- One row per wait a job began, by the name the handler gave it (or its place in the handler):
-- a resumed attempt finds how its earlier waits ended here, so work before a wait is not waited
-- for again.
CREATE TABLE __schema__.job_waits (
    job_id      bigint NOT NULL REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    name        text NOT NULL,
    -- The job's queue (which never changes): the gauges count waiting jobs from here.
    queue       text NOT NULL,
    -- The signal key waited for; NULL for a sleep, which only its deadline ends.
    key         text,
    state       text NOT NULL DEFAULT 'waiting',
    since       timestamptz NOT NULL,
    deadline    timestamptz,
    -- The attempt (fencing token) that began the wait.
    token       bigint NOT NULL,
    signal_id   bigint,
    resolved_at timestamptz,
    -- Who ended it, when an operator did.
    ended_by    text,
    swept       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, name),
    CONSTRAINT job_waits_state_known CHECK (state IN ('waiting', 'signalled', 'timed_out', 'ended', 'cancelled')),
    CONSTRAINT job_waits_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT job_waits_key_length CHECK (char_length(key) BETWEEN 1 AND 400),
    CONSTRAINT job_waits_waits_for_something CHECK (key IS NOT NULL OR deadline IS NOT NULL),
    CONSTRAINT job_waits_resolved CHECK ((state = 'waiting') = (resolved_at IS NULL)),
    CONSTRAINT job_waits_signalled CHECK ((state = 'signalled') = (signal_id IS NOT NULL))
);
-- A job waits for one thing at a time.
CREATE UNIQUE INDEX job_waits_one_at_a_time_idx ON __schema__.job_waits (job_id) WHERE state = 'waiting';
CREATE INDEX job_waits_key_idx ON __schema__.job_waits (key, since) WHERE state = 'waiting' AND key IS NOT NULL;
CREATE INDEX job_waits_deadline_idx ON __schema__.job_waits (deadline)
    WHERE state = 'waiting' AND deadline IS NOT NULL;
CREATE INDEX job_waits_unswept_idx ON __schema__.job_waits (job_id) WHERE NOT swept;
CREATE INDEX job_waits_queue_idx ON __schema__.job_waits (queue) WHERE state = 'waiting';

-- Signals dropped undelivered when their keeping time ended, since this schema was made.
CREATE TABLE __schema__.signal_totals (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    expired bigint NOT NULL DEFAULT 0
);
INSERT INTO __schema__.signal_totals DEFAULT VALUES;

-- Delivers signal `sid`, if it is still in the mailbox and unexpired at `at`, to the oldest job
-- waiting for its key that no one else has locked: the wait is marked signalled, the job goes
-- pending, its history names the sender (and `note`, the sender's reason, when given) and its
-- queue is told. Returns the job woken, or NULL. Not callable by other roles: signal() and
-- signals_sweep() call it.
CREATE FUNCTION __schema__.signal_deliver(sid bigint, at timestamptz, note text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s __schema__.signals;
    candidate record;
    waiter record;
    got boolean := false;
BEGIN
    SELECT * INTO s FROM __schema__.signals
    WHERE id = sid AND job_id IS NULL AND expires_at > at
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The key's waits, longest first, each locked in turn with its job (SKIP LOCKED: one locked
    -- elsewhere is passed over, not waited for), through the key's index alone: a join in one
    -- statement let a plan read every pending job.
    FOR candidate IN
        SELECT w.job_id, w.name FROM __schema__.job_waits w
        WHERE w.key = s.key AND w.state = 'waiting'
        ORDER BY w.since, w.job_id
    LOOP
        SELECT w.job_id, w.name, w.token, j.queue INTO waiter
        FROM __schema__.job_waits w, LATERAL (
            SELECT j.queue FROM __schema__.jobs j
            WHERE j.id = w.job_id AND j.state = 'waiting'
            FOR UPDATE SKIP LOCKED) j
        WHERE w.job_id = candidate.job_id AND w.name = candidate.name AND w.state = 'waiting'
        FOR UPDATE OF w SKIP LOCKED;
        got := FOUND;
        EXIT WHEN got;
    END LOOP;
    IF NOT got THEN
        RETURN NULL;
    END IF;
    UPDATE __schema__.job_waits
    SET state = 'signalled', signal_id = s.id, resolved_at = at, swept = true
    WHERE job_id = waiter.job_id AND name = waiter.name;
    UPDATE __schema__.signals SET job_id = waiter.job_id, delivered_at = at, swept = true WHERE id = s.id;
    UPDATE __schema__.jobs SET state = 'pending', available_at = at WHERE id = waiter.job_id;
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    VALUES (waiter.job_id, 'signalled', 'waiting', 'pending', waiter.token, s.sent_by,
            left(format('signal %s to %s', s.id, s.key) || coalesce(': ' || note, ''), 2000), at);
    PERFORM pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                          ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63),
                      waiter.queue);
    RETURN waiter.job_id;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signal_deliver(bigint, timestamptz, text) FROM PUBLIC;

-- Sends a signal: the one guarded way in for every role, from Python (app.signal), the CLI, psql
-- or any language, in the caller's transaction. Checks the bounds before writing anything. Returns
-- the signal's id and its outcome: 'delivered' (a waiting job was woken: job_id), 'kept' (no job
-- waits for the key yet: it is in the mailbox for `keep_seconds`) or 'duplicate' (a signal with
-- this idempotency key was sent to this key before and is still kept: nothing was written; its
-- id and, when delivered, its job). `sender` names who sent it (the database role when NULL, as
-- an operator's actor elsewhere: what the caller says); `note`, the sender's reason, goes into the
-- history of a job the signal wakes at once.
CREATE FUNCTION __schema__.signal(
    key text,
    payload jsonb DEFAULT 'null',
    idempotency_key text DEFAULT NULL,
    keep_seconds float8 DEFAULT 604800,
    sender text DEFAULT NULL,
    note text DEFAULT NULL
) RETURNS TABLE (signal_id bigint, outcome text, job_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    at timestamptz := statement_timestamp();
    sid bigint;
    woken bigint;
    size integer;
BEGIN
    IF key IS NULL OR char_length(key) NOT BETWEEN 1 AND 400 THEN
        RAISE EXCEPTION 'a signal key must be 1 to 400 characters, got %', coalesce(char_length(key)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'name what is awaited, e.g. ''payment:order-7''; hash a longer key';
    END IF;
    IF idempotency_key IS NOT NULL AND char_length(idempotency_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a signal''s idempotency key must be 1 to 200 characters, got %', char_length(idempotency_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(coalesce(payload, 'null'::jsonb)::text);
    IF size > 65536 THEN
        RAISE EXCEPTION 'a signal''s payload is % bytes of JSON, over the limit of 65536', size
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'store large data elsewhere and send a reference to it';
    END IF;
    IF keep_seconds IS NULL OR NOT keep_seconds BETWEEN 1 AND 7776000 THEN
        RAISE EXCEPTION 'a signal is kept 1 second to 90 days (7776000 seconds) for a waiter, got %', keep_seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF idempotency_key IS NOT NULL THEN
        RETURN QUERY SELECT s.id, 'duplicate'::text, s.job_id FROM __schema__.signals s
                     WHERE s.key = signal.key AND s.idempotency_key = signal.idempotency_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO __schema__.signals (key, payload, idempotency_key, sent_at, expires_at, sent_by)
    VALUES (signal.key, coalesce(signal.payload, 'null'::jsonb), signal.idempotency_key, at,
            at + make_interval(secs => keep_seconds), coalesce(left(sender, 200), session_user))
    ON CONFLICT (key, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO sid;
    IF sid IS NULL THEN
        -- The same idempotency key committed by another sender meanwhile.
        RETURN QUERY SELECT s.id, 'duplicate'::text, s.job_id FROM __schema__.signals s
                     WHERE s.key = signal.key AND s.idempotency_key = signal.idempotency_key;
        RETURN;
    END IF;
    woken := __schema__.signal_deliver(sid, at, left(note, 1000));
    RETURN QUERY SELECT sid, CASE WHEN woken IS NULL THEN 'kept' ELSE 'delivered' END, woken;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signal(text, jsonb, text, float8, text, text) FROM PUBLIC;

-- The recovery pass's part for signals: drops up to `batch` mailbox signals whose keeping time
-- ended (counted in signal_totals), and matches what a race between a send and a wait left
-- unmatched: every signal and wait not yet looked at is looked at once, after its commit, and
-- delivered where a partner exists. One left unmatched because its partner was locked elsewhere
-- is looked at again next time. Returns how many it delivered and how many it dropped.
CREATE FUNCTION __schema__.signals_sweep(batch integer)
RETURNS TABLE (delivered integer, expired integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    at timestamptz := statement_timestamp();
    n_delivered integer := 0;
    n_expired integer := 0;
    s record;
    w record;
    partner bigint;
BEGIN
    WITH doomed AS (
        SELECT id FROM __schema__.signals
        WHERE job_id IS NULL AND expires_at <= at
        ORDER BY expires_at
        LIMIT batch
        FOR UPDATE SKIP LOCKED
    ), dropped AS (
        DELETE FROM __schema__.signals x USING doomed d WHERE x.id = d.id AND x.job_id IS NULL RETURNING x.id
    )
    SELECT count(*) INTO n_expired FROM dropped;
    IF n_expired > 0 THEN
        INSERT INTO __schema__.signal_totals AS t (one, expired) VALUES (true, n_expired)
        ON CONFLICT (one) DO UPDATE SET expired = t.expired + excluded.expired;
    END IF;

    FOR s IN
        SELECT id, key, job_id IS NOT NULL AS delivered FROM __schema__.signals WHERE NOT swept ORDER BY id LIMIT batch
    LOOP
        IF s.delivered THEN
            UPDATE __schema__.signals SET swept = true WHERE id = s.id;
        ELSIF __schema__.signal_deliver(s.id, at) IS NOT NULL THEN
            n_delivered := n_delivered + 1;
        ELSIF NOT EXISTS (SELECT 1 FROM __schema__.job_waits x WHERE x.key = s.key AND x.state = 'waiting') THEN
            UPDATE __schema__.signals SET swept = true WHERE id = s.id;
        END IF;
    END LOOP;

    FOR w IN
        SELECT job_id, name, key, state FROM __schema__.job_waits WHERE NOT swept ORDER BY job_id LIMIT batch
    LOOP
        IF w.key IS NOT NULL AND w.state = 'waiting' THEN
            SELECT x.id INTO partner FROM __schema__.signals x
            WHERE x.key = w.key AND x.job_id IS NULL AND x.expires_at > at
            ORDER BY x.id LIMIT 1;
        ELSE
            partner := NULL;
        END IF;
        IF partner IS NOT NULL AND __schema__.signal_deliver(partner, at) IS NOT NULL THEN
            n_delivered := n_delivered + 1;
        ELSIF partner IS NULL THEN
            UPDATE __schema__.job_waits SET swept = true WHERE job_id = w.job_id AND name = w.name;
        END IF;
    END LOOP;
    RETURN QUERY SELECT n_delivered, n_expired;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signals_sweep(integer) FROM PUBLIC;

-- 0026: step conditions (docs/workflows.md, "Steps that wait for the world"). A workflow step may
-- wait, once its dependencies have succeeded, for a signal or a time as well, and may be skipped
-- or cancelled by one. Such a step's job is made `waiting`, with one job_waits row named '@step'
-- that says what for, and what each ending does: resume (the job goes pending and runs), skip (it
-- succeeds without running, with no result, and the steps after it go on) or cancel (it is
-- cancelled, and the steps after it with it). The endings are the waits' own (a signal delivered,
-- a deadline passed, an operator's end), so a step's condition costs no pass of its own and every
-- guarantee of a wait holds for it: a signal delivered once, kept in the mailbox for a step
-- not released yet, never lost to a race between a send and a release.

-- What a wait's ending does to its job. A handler's waits resume on every ending; a step's
-- condition may skip or cancel. An operator's end always resumes.
ALTER TABLE __schema__.job_waits
    ADD COLUMN on_signal text NOT NULL DEFAULT 'resume',
    ADD COLUMN on_deadline text NOT NULL DEFAULT 'resume';
ALTER TABLE __schema__.job_waits ADD CONSTRAINT job_waits_endings_known CHECK (
    on_signal IN ('resume', 'skip', 'cancel') AND on_deadline IN ('resume', 'skip', 'cancel')
);

-- A step's condition, checked and stored at enqueue (workflow_condition_checked): an object with
-- a signal key and/or a number of seconds, and what each does.
ALTER TABLE __schema__.workflow_steps ADD COLUMN condition jsonb;
ALTER TABLE __schema__.workflow_steps ADD CONSTRAINT workflow_steps_condition_object CHECK (
    condition IS NULL OR jsonb_typeof(condition) = 'object'
);

-- A step's condition as enqueue_workflow() takes it, checked: NULL for none, else an object of
-- `key` (a signal key, 1 to 400 characters) and/or `seconds` (more than 0, at most 366 days,
-- counted from the step's release), with `on_signal` and `on_deadline`, each 'resume', 'skip' or
-- 'cancel' (default 'resume'). At least one of them resumes: a step that could only be skipped or
-- cancelled would never run. Raises naming `step` and the fix.
CREATE FUNCTION __schema__.workflow_condition_checked(condition jsonb, step text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    key text;
    seconds numeric;
    on_signal text;
    on_deadline text;
BEGIN
    IF condition IS NULL OR condition = 'null'::jsonb THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(condition) <> 'object'
       OR EXISTS (SELECT 1 FROM jsonb_object_keys(condition) k
                  WHERE k NOT IN ('key', 'seconds', 'on_signal', 'on_deadline'))
       OR jsonb_typeof(coalesce(condition -> 'key', '""')) <> 'string'
       OR jsonb_typeof(coalesce(condition -> 'seconds', '1')) <> 'number'
       OR jsonb_typeof(coalesce(condition -> 'on_signal', '""')) <> 'string'
       OR jsonb_typeof(coalesce(condition -> 'on_deadline', '""')) <> 'string' THEN
        RAISE EXCEPTION 'step %: a condition is an object of key (a string), seconds (a number), on_signal and '
                        'on_deadline, got %', quote_literal(step), left(condition::text, 200)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    key := condition ->> 'key';
    seconds := (condition ->> 'seconds')::numeric;
    on_signal := coalesce(condition ->> 'on_signal', 'resume');
    on_deadline := coalesce(condition ->> 'on_deadline', 'resume');
    IF key IS NULL AND seconds IS NULL THEN
        RAISE EXCEPTION 'step %: a condition waits for a signal key, a number of seconds, or both', quote_literal(step)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF key IS NOT NULL AND char_length(key) NOT BETWEEN 1 AND 400 THEN
        RAISE EXCEPTION 'step %: a condition''s signal key must be 1 to 400 characters, got %',
                        quote_literal(step), char_length(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF seconds IS NOT NULL AND NOT (seconds > 0 AND seconds <= 31622400) THEN
        RAISE EXCEPTION 'step %: a condition waits more than 0 seconds and at most 366 days, got % seconds',
                        quote_literal(step), seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_signal NOT IN ('resume', 'skip', 'cancel') OR on_deadline NOT IN ('resume', 'skip', 'cancel') THEN
        RAISE EXCEPTION 'step %: on_signal and on_deadline are ''resume'', ''skip'' or ''cancel'', got % and %',
                        quote_literal(step), quote_literal(on_signal), quote_literal(on_deadline)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT ((key IS NOT NULL AND on_signal = 'resume') OR (seconds IS NOT NULL AND on_deadline = 'resume')) THEN
        RAISE EXCEPTION 'step %: its condition never lets it run: neither its signal nor its deadline resumes it',
                        quote_literal(step)
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'give the step something to wait for (wait_for=) besides what skips or cancels it';
    END IF;
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'key', key, 'seconds', seconds,
        'on_signal', CASE WHEN key IS NOT NULL THEN on_signal END,
        'on_deadline', CASE WHEN seconds IS NOT NULL THEN on_deadline END));
END
$$;

-- Ends the wait `wait_name` of job `job` as `outcome` ('signalled', with signal `sid`, or
-- 'timed_out') at `at`, and moves the job as the wait's ending says: resume (pending, its queue
-- told), skip (succeeded, no result) or cancel (cancelled). The caller has locked the wait and
-- the job, both waiting. The job's history names the signal's sender (and `note`) or the
-- deadline. Not callable by other roles: signal_deliver() and waits_due_to_skip_or_cancel() call it.
CREATE FUNCTION __schema__.wait_wake(
    job bigint, wait_name text, outcome text, at timestamptz, sid bigint DEFAULT NULL,
    sender text DEFAULT NULL, note text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    w __schema__.job_waits;
    ending text;
    target __schema__.job_state;
    what text;
BEGIN
    -- The wait first: the cancel guard, which a cancel below fires, ends a waiting wait as
    -- cancelled, and this one has ended otherwise.
    UPDATE __schema__.job_waits x
    SET state = outcome, signal_id = sid, resolved_at = at, swept = true
    WHERE x.job_id = job AND x.name = wait_name AND x.state = 'waiting'
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    ending := CASE WHEN outcome = 'signalled' THEN w.on_signal ELSE w.on_deadline END;
    target := CASE ending WHEN 'resume' THEN 'pending' WHEN 'skip' THEN 'succeeded' ELSE 'cancelled' END;
    UPDATE __schema__.jobs j
    SET state = target,
        available_at = CASE WHEN outcome = 'timed_out' THEN least(w.deadline, at) ELSE at END,
        finished_at = CASE WHEN target = 'pending' THEN NULL ELSE at END,
        -- A skipped job shows no error, as a succeeded one; a cancelled one says why.
        last_error_code = CASE target WHEN 'cancelled' THEN 'CONDITION_CANCELLED'
                                      WHEN 'succeeded' THEN NULL ELSE j.last_error_code END,
        last_error = CASE target WHEN 'cancelled'
                          THEN format('cancelled by its condition: %s', CASE WHEN outcome = 'signalled'
                                      THEN format('a signal to %s', w.key) ELSE 'its deadline passed' END)
                          WHEN 'succeeded' THEN NULL ELSE j.last_error END
    WHERE j.id = job AND j.state = 'waiting';
    what := CASE WHEN outcome = 'signalled' THEN format('signal %s to %s', sid, w.key)
                 ELSE format('wait %s reached its deadline', w.name) END
            || CASE ending WHEN 'skip' THEN ': skipped, as its condition says'
                           WHEN 'cancel' THEN ': cancelled, as its condition says' ELSE '' END;
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    VALUES (job, CASE WHEN outcome = 'signalled' THEN 'signalled' ELSE 'wait_timeout' END, 'waiting', target,
            w.token, sender, left(what || coalesce(': ' || note, ''), 2000), at);
    IF target = 'pending' THEN
        PERFORM pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                              ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63),
                          w.queue);
    END IF;
END
$$;
REVOKE ALL ON FUNCTION __schema__.wait_wake(bigint, text, text, timestamptz, bigint, text, text) FROM PUBLIC;

-- As in 0025, with the waiter's wake-up in wait_wake(): a step's condition may skip or cancel.
CREATE OR REPLACE FUNCTION __schema__.signal_deliver(sid bigint, at timestamptz, note text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s __schema__.signals;
    candidate record;
    waiter record;
    got boolean := false;
BEGIN
    SELECT * INTO s FROM __schema__.signals
    WHERE id = sid AND job_id IS NULL AND expires_at > at
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The key's waits, longest first, each locked in turn with its job (SKIP LOCKED: one locked
    -- elsewhere is passed over, not waited for), through the key's index alone: a join in one
    -- statement let a plan read every pending job.
    FOR candidate IN
        SELECT w.job_id, w.name FROM __schema__.job_waits w
        WHERE w.key = s.key AND w.state = 'waiting'
        ORDER BY w.since, w.job_id
    LOOP
        SELECT w.job_id, w.name INTO waiter
        FROM __schema__.job_waits w, LATERAL (
            SELECT j.id FROM __schema__.jobs j
            WHERE j.id = w.job_id AND j.state = 'waiting'
            FOR UPDATE SKIP LOCKED) j
        WHERE w.job_id = candidate.job_id AND w.name = candidate.name AND w.state = 'waiting'
        FOR UPDATE OF w SKIP LOCKED;
        got := FOUND;
        EXIT WHEN got;
    END LOOP;
    IF NOT got THEN
        RETURN NULL;
    END IF;
    UPDATE __schema__.signals SET job_id = waiter.job_id, delivered_at = at, swept = true WHERE id = s.id;
    PERFORM __schema__.wait_wake(waiter.job_id, waiter.name, 'signalled', at, s.id, s.sent_by, note);
    RETURN waiter.job_id;
END
$$;

-- The deadline pass's part for waits whose deadline skips or cancels (a step's condition): up to
-- `batch` of them due by `at`, earliest first, each with its job locked (SKIP LOCKED: safe in
-- every worker at once), ended through wait_wake(). A cancel is the admin's (the cancel guard),
-- so it runs here, as the schema's owner, for the conditions their producers declared. Returns how
-- many it ended. The promotion pass calls it from waits_expire_due, which ends the others.
CREATE FUNCTION __schema__.waits_due_to_skip_or_cancel(batch integer, at timestamptz) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    w record;
    n integer := 0;
BEGIN
    FOR w IN
        SELECT x.job_id, x.name FROM __schema__.job_waits x
        WHERE x.state = 'waiting' AND x.deadline <= at AND x.on_deadline <> 'resume'
        ORDER BY x.deadline
        LIMIT batch
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM 1 FROM __schema__.jobs j WHERE j.id = w.job_id AND j.state = 'waiting' FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            PERFORM __schema__.wait_wake(w.job_id, w.name, 'timed_out', at);
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
REVOKE ALL ON FUNCTION __schema__.waits_due_to_skip_or_cancel(integer, timestamptz) FROM PUBLIC;

-- A released step with a condition: its wait begins at `at` (its job was just made `waiting`).
-- A signal already kept for its key is delivered now when it resumes the step; one that skips
-- or cancels is left to the recovery pass's sweep (the wait is unswept), so that a chain of
-- steps skipped one by the other never runs inside one completion.
CREATE FUNCTION __schema__.workflow_condition_begin(job bigint, job_queue text, condition jsonb, at timestamptz)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    kept bigint;
BEGIN
    INSERT INTO __schema__.job_waits (job_id, name, queue, key, state, since, deadline, token,
                                      on_signal, on_deadline)
    VALUES (job, '@step', job_queue, condition ->> 'key', 'waiting', at,
            at + make_interval(secs => (condition ->> 'seconds')::float8), 0,
            coalesce(condition ->> 'on_signal', 'resume'), coalesce(condition ->> 'on_deadline', 'resume'));
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, error, at)
    VALUES (job, 'wait', NULL, 'waiting', 0,
            left(format('wait @step for its condition: %s', concat_ws(', ',
                 CASE WHEN condition ? 'key' THEN
                     format('a signal to %s %s', condition ->> 'key',
                            CASE condition ->> 'on_signal' WHEN 'skip' THEN 'skips it'
                                 WHEN 'cancel' THEN 'cancels it' ELSE 'runs it' END) END,
                 CASE WHEN condition ? 'seconds' THEN
                     format('at %s %s', at + make_interval(secs => (condition ->> 'seconds')::float8),
                            CASE condition ->> 'on_deadline' WHEN 'skip' THEN 'it is skipped'
                                 WHEN 'cancel' THEN 'it is cancelled' ELSE 'it runs' END) END)), 2000), at);
    IF condition ->> 'key' IS NOT NULL AND coalesce(condition ->> 'on_signal', 'resume') = 'resume' THEN
        SELECT s.id INTO kept FROM __schema__.signals s
        WHERE s.key = condition ->> 'key' AND s.job_id IS NULL AND s.expires_at > at
        ORDER BY s.id LIMIT 1;
        IF kept IS NOT NULL THEN
            PERFORM __schema__.signal_deliver(kept, at);
        END IF;
    END IF;
END
$$;

-- As in 0020, with a step's condition: its job is made waiting, and its wait begins.
CREATE OR REPLACE FUNCTION __schema__.workflow_make_job(wf bigint, step text, at timestamptz, inline boolean)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s __schema__.workflow_steps;
    parents bigint;
    input_bytes bigint;
    input jsonb;
BEGIN
    SELECT * INTO s FROM __schema__.workflow_steps st WHERE st.workflow_id = wf AND st.name = step;
    IF NOT FOUND OR s.state <> 'waiting' OR s.remaining <> 0 THEN
        RETURN NULL;
    END IF;
    IF s.input_arg IS NOT NULL THEN
        IF inline THEN
            SELECT count(*) INTO parents FROM (
                SELECT 1 FROM __schema__.workflow_edges e WHERE e.workflow_id = wf AND e.child = step
                LIMIT __schema__.workflow_inline_limit() + 1) p;
            IF parents > __schema__.workflow_inline_limit() THEN
                INSERT INTO __schema__.workflow_work (workflow_id, step, kind)
                VALUES (wf, step, 'materialize') ON CONFLICT DO NOTHING;
                RETURN NULL;
            END IF;
        END IF;
        SELECT coalesce(sum(octet_length(p.result::text)), 0) INTO input_bytes
        FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps p ON p.workflow_id = e.workflow_id AND p.name = e.parent
        WHERE e.workflow_id = wf AND e.child = step;
        IF input_bytes > __schema__.workflow_max_input_bytes() THEN
            UPDATE __schema__.workflow_steps st
            SET state = 'held',
                held_reason = format('INPUT_TOO_LARGE: the results of its dependencies come to %s bytes, and a '
                                     'step''s input is at most %s bytes; return a reference to the data '
                                     '(a path, a key) instead of the data itself',
                                     input_bytes, __schema__.workflow_max_input_bytes())
            WHERE st.workflow_id = wf AND st.name = step;
            PERFORM __schema__.workflow_follow(wf, ARRAY[step], at, __schema__.workflow_inline_limit());
            RETURN NULL;
        END IF;
        SELECT CASE WHEN s.input_kind = 'one' THEN (array_agg(p.result ORDER BY e.position))[1]
                    ELSE coalesce(jsonb_agg(p.result ORDER BY e.position), '[]'::jsonb) END
        INTO input
        FROM __schema__.workflow_edges e
        JOIN __schema__.workflow_steps p ON p.workflow_id = e.workflow_id AND p.name = e.parent
        WHERE e.workflow_id = wf AND e.child = step;
        s.payload := s.payload || jsonb_build_object(s.input_arg, input);
    END IF;
    INSERT INTO __schema__.jobs (id, queue, task, payload, priority, max_attempts, state, available_at,
                                 created_at, result_wanted, workflow_id, workflow_step)
    OVERRIDING SYSTEM VALUE
    VALUES (s.job_id, s.queue, s.task, s.payload, s.priority, s.max_attempts,
            (CASE WHEN s.condition IS NULL THEN 'pending' ELSE 'waiting' END)::__schema__.job_state, at, at,
            s.result_wanted, wf, step);
    UPDATE __schema__.workflow_steps st
    SET state = 'released', released_at = at, held_reason = NULL
    WHERE st.workflow_id = wf AND st.name = step;
    DELETE FROM __schema__.workflow_work w
    WHERE w.workflow_id = wf AND w.step = workflow_make_job.step AND w.kind = 'materialize';
    IF s.condition IS NOT NULL THEN
        -- No queue to wake: the job waits (a kept signal that resumes it wakes its queue itself).
        PERFORM __schema__.workflow_condition_begin(s.job_id, s.queue, s.condition, at);
        RETURN NULL;
    END IF;
    RETURN s.queue;
END
$$;

-- As in 0019, with each step's `condition` (workflow_condition_checked) stored, and the steps
-- without dependencies that have one made waiting.
CREATE OR REPLACE FUNCTION __schema__.enqueue_workflow(name text, steps jsonb, on_dead text DEFAULT 'hold')
RETURNS TABLE (workflow_id bigint, step text, job_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    bad text;
    t_now timestamptz := now();
    woken text;
    places jsonb;
    gated record;
BEGIN
    IF name IS NULL OR char_length(name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a workflow needs a name of 1 to 200 characters, got %', coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF on_dead IS NULL OR on_dead NOT IN ('hold', 'cancel') THEN
        RAISE EXCEPTION 'on_dead must be ''hold'' or ''cancel'', got %', coalesce(quote_literal(on_dead), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'hold keeps the steps after a dead step waiting for its reprocess; cancel cancels them';
    END IF;
    IF steps IS NULL OR jsonb_typeof(steps) <> 'array' OR jsonb_array_length(steps) = 0 THEN
        RAISE EXCEPTION 'a workflow needs its steps as a non-empty JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_array_length(steps) > 100000 THEN
        RAISE EXCEPTION 'a workflow has at most 100000 steps, this one has %', jsonb_array_length(steps)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'split the work into several workflows';
    END IF;
    SELECT s.value::text INTO bad FROM jsonb_array_elements(steps) s
    WHERE jsonb_typeof(s.value) <> 'object' OR jsonb_typeof(s.value -> 'name') IS DISTINCT FROM 'string'
       OR jsonb_typeof(s.value -> 'task') IS DISTINCT FROM 'string'
       OR jsonb_typeof(coalesce(s.value -> 'payload', '{}')) <> 'object'
       OR jsonb_typeof(coalesce(s.value -> 'after', '[]')) <> 'array'
       OR jsonb_typeof(coalesce(s.value -> 'queue', '"q"')) <> 'string'
       OR jsonb_typeof(coalesce(s.value -> 'priority', '0')) <> 'number'
       OR jsonb_typeof(coalesce(s.value -> 'max_attempts', '1')) <> 'number'
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'a workflow step must be an object with a name and a task (strings), a payload object, '
                        'an after array, and a queue (a string), a priority and max_attempts (numbers) when '
                        'given, got %', left(bad, 200)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.value ->> 'name' INTO bad FROM jsonb_array_elements(steps) s
    GROUP BY s.value ->> 'name' HAVING count(*) > 1 LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'two steps of the workflow are named %', quote_literal(bad)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'give each step its own name';
    END IF;
    -- Each step's place, looked up by name in one JSON object: a join of the steps with
    -- themselves here, under LIMIT 1, can be planned as a nested loop, which a fan-out of
    -- 100,000 turns into 10^10 comparisons.
    SELECT jsonb_object_agg(s.value ->> 'name', s.n) INTO places
    FROM jsonb_array_elements(steps) WITH ORDINALITY s(value, n);
    SELECT format('step %s depends on %s, which is not listed before it', quote_literal(c.value ->> 'name'),
                  quote_literal(a.parent)) INTO bad
    FROM jsonb_array_elements(steps) WITH ORDINALITY c(value, n)
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(c.value -> 'after', '[]')) a(parent)
    WHERE (places ->> a.parent) IS NULL OR (places ->> a.parent)::bigint >= c.n
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value',
            HINT = 'list each step after the steps it depends on (a workflow has no cycles)';
    END IF;

    INSERT INTO __schema__.workflows (name, on_dead, created_at)
    VALUES (enqueue_workflow.name, enqueue_workflow.on_dead, t_now)
    RETURNING id INTO new_id;
    INSERT INTO __schema__.workflow_steps (workflow_id, name, job_id, task, queue, payload, priority, max_attempts,
                                           result_wanted, input_arg, input_kind, remaining, state, released_at,
                                           condition)
    SELECT new_id, s.value ->> 'name', nextval(pg_get_serial_sequence('__schema__.jobs', 'id')), s.value ->> 'task',
           o.job_queue, coalesce(s.value -> 'payload', '{}'), o.job_priority, o.job_max_attempts,
           coalesce((s.value ->> 'result_wanted')::boolean, false),
           s.value ->> 'input_arg', s.value ->> 'input_kind',
           coalesce(jsonb_array_length(s.value -> 'after'), 0),
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN 'released' ELSE 'waiting' END,
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN t_now END,
           __schema__.workflow_condition_checked(s.value -> 'condition', s.value ->> 'name')
    FROM jsonb_array_elements(steps) WITH ORDINALITY s(value, n)
    LEFT JOIN __schema__.task_policies p ON p.task = s.value ->> 'task'
    CROSS JOIN LATERAL __schema__.enqueue_options(
        p, s.value ->> 'task', coalesce(s.value -> 'payload', '{}'), s.value ->> 'queue',
        (s.value ->> 'priority')::numeric, (s.value ->> 'max_attempts')::numeric,
        format('step %s', quote_literal(s.value ->> 'name'))) o
    ORDER BY s.n;
    INSERT INTO __schema__.workflow_edges (workflow_id, parent, child, position)
    SELECT new_id, a.parent, c.value ->> 'name', a.n
    FROM jsonb_array_elements(steps) c(value)
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(c.value -> 'after', '[]')) WITH ORDINALITY a(parent, n);
    WITH roots AS (
        INSERT INTO __schema__.jobs (id, queue, task, payload, priority, max_attempts, state, available_at,
                                     created_at, result_wanted, workflow_id, workflow_step)
        OVERRIDING SYSTEM VALUE
        SELECT s.job_id, s.queue, s.task, s.payload, s.priority, s.max_attempts,
               (CASE WHEN s.condition IS NULL THEN 'pending' ELSE 'waiting' END)::__schema__.job_state, t_now, t_now,
               s.result_wanted, s.workflow_id, s.name
        FROM __schema__.workflow_steps s
        WHERE s.workflow_id = new_id AND s.remaining = 0
        ORDER BY s.job_id
        RETURNING jobs.queue, jobs.state
    )
    SELECT string_agg(DISTINCT r.queue, ',') INTO woken FROM roots r WHERE r.state = 'pending';
    FOR gated IN
        SELECT s.job_id, s.queue, s.condition FROM __schema__.workflow_steps s
        WHERE s.workflow_id = new_id AND s.remaining = 0 AND s.condition IS NOT NULL
        ORDER BY s.job_id
    LOOP
        PERFORM __schema__.workflow_condition_begin(gated.job_id, gated.queue, gated.condition, t_now);
    END LOOP;
    PERFORM pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                          ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63), q)
    FROM unnest(string_to_array(woken, ',')) AS q;
    RETURN QUERY SELECT new_id, s.name, s.job_id FROM __schema__.workflow_steps s
                 WHERE s.workflow_id = new_id ORDER BY s.job_id;
END
$$;

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
-- A job's values and a workflow's, as deleting the job or the workflow finds them through the
-- foreign keys (`WHERE job_id = $1`), which the index above cannot serve (0029): each holds the
-- rows of its kind of owner only.
CREATE INDEX published_values_job_idx ON __schema__.published_values (job_id)
    WHERE job_id IS NOT NULL;
CREATE INDEX published_values_workflow_idx ON __schema__.published_values (workflow_id)
    WHERE workflow_id IS NOT NULL;

-- An idle worker's offer to take a lone job in its enqueue's own statement (0030,
-- docs/hand-off.md): updated in place, never an indexed column, so it stays a page or two.
CREATE TABLE __schema__.worker_offers (
    worker          text PRIMARY KEY,
    channel         text NOT NULL,
    queues          text[] NOT NULL,
    tasks           text[] NOT NULL,
    lease_seconds   float8 NOT NULL,
    runtime_seconds float8 NOT NULL,
    slots           integer NOT NULL,
    until           timestamptz NOT NULL
) WITH (fillfactor = 50);
