-- 0019: what a role can do is what docs/security.md says.
-- - No function that runs for another role, or as a trigger, runs with a search_path its caller
--   chose: jobs_cancel_guard() was the one without a pinned path, so a worker role that may
--   create a function named has_table_privilege ahead of pg_catalog could cancel jobs.
-- - No job holds its unique key while cancelled, whatever its scope: an operator's cancel
--   always frees the key. The same scope rule holds for the task catalog, whose CHECKs take
--   exactly what jobs take: a declared policy can no longer make every enqueue of its task fail.
-- - enqueue() and enqueue_workflow() fill and bound a job's queue, priority, attempt budget and
--   payload in one function, enqueue_options(), by the Python client's own limits; enqueue()
--   takes a unique scope only within the one its task declares.
-- In steps (migrate.py, STEP): the rows whose scope holds cancelled are rewritten in batches
-- before and after the jobs constraint is added NOT VALID (a moment's lock, no scan), so no claim
-- meets a row the constraint refuses; the constraint is validated last, which scans without
-- blocking writes. Every step can run again after a failure part-way.

-- Rewrites, in batches of 10,000 ids each committed on its own, every job whose unique scope holds
-- cancelled: the state leaves the scope (a scope never loses scheduled, pending or running, so no
-- row enters the unique index that was not in it). Dropped at the end of this migration.
-- (A procedure that commits may not SET its path; it names every object of the schema.)
CREATE OR REPLACE PROCEDURE __schema__.unique_scopes_without_cancelled() LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    top bigint;
BEGIN
    SELECT min(id), max(id) INTO lo, top FROM __schema__.jobs;
    WHILE lo <= top LOOP
        UPDATE __schema__.jobs j SET unique_states = array_remove(j.unique_states, 'cancelled')
        WHERE j.id >= lo AND j.id < lo + 10000 AND 'cancelled' = ANY(j.unique_states);
        COMMIT;
        lo := lo + 10000;
    END LOOP;
END
$$;

-- tenure: step
CALL __schema__.unique_scopes_without_cancelled();

-- tenure: step
-- The cancel guard checks the caller's privilege (it must not run as its owner), under a path
-- nobody can put a function ahead of.
CREATE OR REPLACE FUNCTION __schema__.jobs_cancel_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT pg_catalog.has_table_privilege(pg_catalog.format('%I.queue_pauses', TG_TABLE_SCHEMA), 'INSERT') THEN
        RAISE EXCEPTION 'role % may not cancel jobs', current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel and revoke as the admin role (see tenure roles)';
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_unique_scope;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_unique_scope CHECK (
    (unique_key IS NULL) = (unique_states IS NULL)
    AND (unique_key IS NULL OR (unique_states @> ARRAY['scheduled', 'pending', 'running']::__schema__.job_state[]
                                AND NOT unique_states @> ARRAY['cancelled']::__schema__.job_state[]
                                AND char_length(unique_key) BETWEEN 1 AND 500))
) NOT VALID;

-- A declared scope a job could not take (without scheduled, pending or running, or with
-- cancelled) made every enqueue of its task fail: such a scope becomes the nearest one a job
-- takes. Workers declare their tasks again when they start.
UPDATE __schema__.task_policies
SET unique_states = ARRAY(SELECT DISTINCT s FROM unnest(array_remove(unique_states, 'cancelled')
                                                        || '{scheduled,pending,running}'::__schema__.job_state[]) s
                          ORDER BY s)
WHERE unique_states IS NOT NULL
  AND NOT (unique_states @> '{scheduled,pending,running}' AND NOT unique_states @> '{cancelled}');
ALTER TABLE __schema__.task_policies ADD CONSTRAINT task_policies_unique_scope CHECK (
    unique_states IS NULL
    OR (unique_states @> ARRAY['scheduled', 'pending', 'running']::__schema__.job_state[]
        AND NOT unique_states @> ARRAY['cancelled']::__schema__.job_state[])
);

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

CREATE OR REPLACE FUNCTION __schema__.enqueue(
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
                max_attempts, t_now, ordering_key, coalesce(idempotency_key, gen_random_uuid()),
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
            WHERE j.idempotency_key = enqueue.idempotency_key
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

-- tenure: step
CALL __schema__.unique_scopes_without_cancelled();

-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_unique_scope;

-- tenure: step
DROP PROCEDURE IF EXISTS __schema__.unique_scopes_without_cancelled();
