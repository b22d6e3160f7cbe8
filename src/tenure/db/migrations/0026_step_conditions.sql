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
