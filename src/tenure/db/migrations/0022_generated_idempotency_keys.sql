-- 0022: a job whose caller chose no idempotency key gets a generated one of version 8
-- (tenure/model/keys.py), here the column's default, as the client does for the jobs it sends.
-- The key look-ups name the predicate of the unique index 0023 builds on chosen keys only, so
-- they stay index look-ups there, and they find the same rows through the index on every key
-- before it. A key of version 8 is taken as generated wherever it comes from.

ALTER TABLE __schema__.jobs ALTER COLUMN idempotency_key SET DEFAULT overlay(gen_random_uuid()::text PLACING '8' FROM 15 FOR 1)::uuid;

CREATE OR REPLACE FUNCTION __schema__.job_by_idempotency_key(key uuid)
RETURNS TABLE (id bigint, available_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT j.id, j.available_at FROM __schema__.jobs j
      WHERE j.idempotency_key = key AND substr(j.idempotency_key::text, 15, 1) <> '8' $$;

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
