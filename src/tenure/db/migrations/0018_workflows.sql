-- 0018: workflows (docs/workflows.md): steps that are jobs, released by their parents' fenced
-- completions. A workflow's steps are rows here from the start; a step becomes a job row when the
-- last of its dependencies succeeds, inside that dependency's completing transaction (the
-- jobs_workflow_advance trigger). A holder that lost its lease completes nothing, so it releases
-- nothing. Each step's job id is drawn when the workflow is enqueued, so the caller knows every
-- step's job from the start. The worker's own statements do not change: a worker of an older
-- version runs steps as the jobs they are, and this migration can run under running workers.
-- New nullable columns with no default cost no rewrite of jobs.

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
    CONSTRAINT workflow_steps_queue_format CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
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

-- Every step after `step` in its workflow, however far: what a dead or cancelled step holds or
-- cancels, and what its reprocess lets wait again.
CREATE FUNCTION __schema__.workflow_steps_after(workflow bigint, step text) RETURNS TABLE (name text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    WITH RECURSIVE after_it(name) AS (
        SELECT e.child FROM __schema__.workflow_edges e
        WHERE e.workflow_id = workflow AND e.parent = step
        UNION
        SELECT e.child FROM __schema__.workflow_edges e JOIN after_it a ON e.parent = a.name
        WHERE e.workflow_id = workflow
    )
    SELECT a.name FROM after_it a
$$;

-- The one place a step's job moves its workflow on, whichever statement moved the job: a fenced
-- completion, a failure or expiry that made it dead, a cancel, a reprocess. SECURITY DEFINER:
-- the roles that move jobs need no privilege on the workflow tables.
-- - succeeded: the step keeps its result; each child's count of dependencies falls by one, the
--   children locked in name order (two completions never wait on each other's children in
--   opposite orders); a child at 0 becomes its job, its inputs (the results of its
--   dependencies, read after the lock, so every other parent's committed result is seen) in its
--   payload under its input argument. Workers are woken for the children's queues.
-- - dead: every step after it (transitively) that waits is held, or cancelled when the workflow
--   says so; cancelled: they are cancelled.
-- - dead or cancelled back to waiting (reprocess): the step is released again, and the steps
--   after it wait again (held ones, and cancelled ones unless the whole workflow was cancelled).
CREATE FUNCTION __schema__.workflow_advance() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    policy text;
    woken text;
    children bigint;
BEGIN
    IF NEW.state = 'succeeded' THEN
        -- The step's own row, and its children's locked in name order, in one statement; the
        -- counting below is a statement of its own, so that it reads after the locks.
        WITH own AS (
            UPDATE __schema__.workflow_steps s
            SET state = 'succeeded', result = NEW.result, finished_at = NEW.finished_at
            WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step
        )
        SELECT count(*) INTO children FROM (
            SELECT 1 FROM __schema__.workflow_steps s
            JOIN __schema__.workflow_edges e ON e.workflow_id = s.workflow_id AND e.child = s.name
            WHERE e.workflow_id = NEW.workflow_id AND e.parent = NEW.workflow_step
            ORDER BY s.name
            FOR UPDATE OF s
        ) locked;
        IF children = 0 THEN
            RETURN NULL;
        END IF;
        WITH counted AS (
            UPDATE __schema__.workflow_steps s
            SET remaining = s.remaining - 1,
                state = CASE WHEN s.remaining = 1 AND s.state = 'waiting' THEN 'released' ELSE s.state END,
                released_at = CASE WHEN s.remaining = 1 AND s.state = 'waiting' THEN NEW.finished_at
                                   ELSE s.released_at END
            FROM __schema__.workflow_edges e
            WHERE e.workflow_id = NEW.workflow_id AND e.parent = NEW.workflow_step
              AND s.workflow_id = e.workflow_id AND s.name = e.child
            RETURNING s.*
        ), released AS (
            INSERT INTO __schema__.jobs (id, queue, task, payload, priority, max_attempts, state, available_at,
                                         created_at, result_wanted, workflow_id, workflow_step)
            OVERRIDING SYSTEM VALUE
            SELECT c.job_id, c.queue, c.task,
                   CASE WHEN c.input_arg IS NULL THEN c.payload
                        ELSE c.payload || jsonb_build_object(c.input_arg, (
                            SELECT CASE WHEN c.input_kind = 'one' THEN (array_agg(p.result ORDER BY e.position))[1]
                                        ELSE coalesce(jsonb_agg(p.result ORDER BY e.position), '[]'::jsonb) END
                            FROM __schema__.workflow_edges e
                            JOIN __schema__.workflow_steps p ON p.workflow_id = e.workflow_id AND p.name = e.parent
                            WHERE e.workflow_id = c.workflow_id AND e.child = c.name))
                   END,
                   c.priority, c.max_attempts, 'pending', NEW.finished_at, NEW.finished_at, c.result_wanted,
                   c.workflow_id, c.name
            FROM counted c
            WHERE c.state = 'released' AND c.remaining = 0
            RETURNING jobs.queue
        )
        SELECT string_agg(DISTINCT r.queue, ',') INTO woken FROM released r;
        IF woken IS NOT NULL THEN
            PERFORM pg_notify(left('tenure:' || TG_TABLE_SCHEMA, 63), q)
            FROM unnest(string_to_array(woken, ',')) AS q;
        END IF;
    ELSIF NEW.state IN ('dead', 'cancelled') THEN
        SELECT w.on_dead INTO policy FROM __schema__.workflows w WHERE w.id = NEW.workflow_id;
        UPDATE __schema__.workflow_steps s
        SET state = NEW.state::text, finished_at = NEW.finished_at
        WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step;
        WITH after_it AS (
            SELECT a.name FROM __schema__.workflow_steps_after(NEW.workflow_id, NEW.workflow_step) a
        ), locked AS (
            -- In name order, as a completion locks a step's children.
            SELECT s.name FROM __schema__.workflow_steps s
            WHERE s.workflow_id = NEW.workflow_id AND s.name IN (SELECT a.name FROM after_it a)
              AND s.state IN ('waiting', 'held')
            ORDER BY s.name
            FOR UPDATE OF s
        )
        UPDATE __schema__.workflow_steps s
        SET state = CASE WHEN NEW.state = 'dead' AND policy = 'hold' THEN 'held' ELSE 'cancelled' END
        FROM locked d
        WHERE s.workflow_id = NEW.workflow_id AND s.name = d.name AND s.state IN ('waiting', 'held');
    ELSIF OLD.state IN ('dead', 'cancelled') AND NEW.state IN ('pending', 'scheduled') THEN
        UPDATE __schema__.workflow_steps s
        SET state = 'released', finished_at = NULL
        WHERE s.workflow_id = NEW.workflow_id AND s.name = NEW.workflow_step;
        WITH after_it AS (
            SELECT a.name FROM __schema__.workflow_steps_after(NEW.workflow_id, NEW.workflow_step) a
        )
        UPDATE __schema__.workflow_steps s
        SET state = 'waiting'
        FROM after_it d
        WHERE s.workflow_id = NEW.workflow_id AND s.name = d.name
          AND (s.state = 'held' OR (s.state = 'cancelled' AND NOT EXISTS (
                SELECT 1 FROM __schema__.workflows w WHERE w.id = NEW.workflow_id AND w.cancelled_at IS NOT NULL)));
    END IF;
    RETURN NULL;
END
$$;
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
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'a workflow step must be an object with a name and a task (strings), a payload object '
                        'and an after array, got %', left(bad, 200)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.value ->> 'name' INTO bad FROM jsonb_array_elements(steps) s
    GROUP BY s.value ->> 'name' HAVING count(*) > 1 LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'two steps of the workflow are named %', quote_literal(bad)
            USING ERRCODE = 'invalid_parameter_value', HINT = 'give each step its own name';
    END IF;
    SELECT format('step %s depends on %s, which is not listed before it', quote_literal(c.value ->> 'name'),
                  quote_literal(a.parent)) INTO bad
    FROM jsonb_array_elements(steps) WITH ORDINALITY c(value, n)
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(c.value -> 'after', '[]')) a(parent)
    LEFT JOIN jsonb_array_elements(steps) WITH ORDINALITY p(value, n) ON p.value ->> 'name' = a.parent
    WHERE p.n IS NULL OR p.n >= c.n
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
           coalesce(s.value ->> 'queue', p.queue, 'default'),
           coalesce(s.value -> 'payload', '{}'),
           coalesce((s.value ->> 'priority')::integer, p.priority, 0),
           coalesce((s.value ->> 'max_attempts')::integer, p.max_attempts, 20),
           coalesce((s.value ->> 'result_wanted')::boolean, false),
           s.value ->> 'input_arg', s.value ->> 'input_kind',
           coalesce(jsonb_array_length(s.value -> 'after'), 0),
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN 'released' ELSE 'waiting' END,
           CASE WHEN coalesce(jsonb_array_length(s.value -> 'after'), 0) = 0 THEN t_now END
    FROM jsonb_array_elements(steps) WITH ORDINALITY s(value, n)
    LEFT JOIN __schema__.task_policies p ON p.task = s.value ->> 'task'
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
