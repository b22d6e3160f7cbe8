-- 0017: one guarded way in for roles that may not write jobs directly: enqueue(), which checks
-- and completes a job the way the Python client does (its task's declared policy, its unique key
-- scoped to its task, the bounds), so a producer role needs no INSERT on jobs. It is also the
-- way to enqueue from a trigger, from psql, or from a service written in another language
-- (docs/sql.md). The task catalog is what workers declare of their tasks at start.

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
    CONSTRAINT task_policies_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    CONSTRAINT task_policies_attempts CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT task_policies_unique CHECK (
        (unique_states IS NULL) = NOT (unique_whole OR unique_fields IS NOT NULL)
        AND NOT (unique_whole AND unique_fields IS NOT NULL)
        AND (unique_period IS NULL OR unique_period > 0)),
    CONSTRAINT task_policies_declared_by_length CHECK (char_length(declared_by) BETWEEN 1 AND 200)
);

-- The key part of a job unique by payload fields (all of them when `fields` is NULL), exactly as
-- the Python client writes it (tenure.unique): compact JSON, keys in code point order. Values
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
-- (tenure.unique.held_key).
CREATE FUNCTION __schema__.unique_held_key(task text, part text) RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN char_length(task || ':' || part) > 400
                THEN left(task, 200) || ':sha256:' || encode(sha256(convert_to(part, 'UTF8')), 'hex')
                ELSE task || ':' || part END
$$;

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
    IF task IS NULL OR char_length(task) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'task must name a task in 1 to 200 characters, got %', coalesce(quote_literal(task), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF payload IS NULL OR jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object, got %', coalesce(jsonb_typeof(payload), 'NULL')
            USING ERRCODE = 'invalid_parameter_value', HINT = 'for example ''{"order_id": 42}''::jsonb';
    END IF;
    SELECT * INTO policy FROM __schema__.task_policies p WHERE p.task = enqueue.task;
    queue := coalesce(queue, policy.queue, 'default');
    priority := coalesce(priority, policy.priority, 0);
    max_attempts := coalesce(max_attempts, policy.max_attempts, 20);
    IF priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority % is out of range: give an integer from -32768 to 32767', priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts % is invalid: give an integer from 1 to 1000', max_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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

-- Nobody may call the definer function unless granted (tenure roles grants it to the producer
-- and worker roles); PostgreSQL grants EXECUTE on a new function to PUBLIC otherwise.
REVOKE ALL ON FUNCTION __schema__.enqueue(text, jsonb, text, timestamptz, float8, integer, integer, text, uuid,
                                          text, __schema__.job_state[], float8, boolean, jsonb, boolean)
    FROM PUBLIC;
