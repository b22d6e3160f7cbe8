-- 0020: a workflow's work that grows with its size never runs inside a parent's completion or a
-- recovery pass (docs/workflows.md, "What a step's completion does, and what it leaves for later").
-- A step's completion (or its job's death, cancel or reprocess) does its workflow's work inline
-- while that work is small: at most `tenure.workflow_inline_limit` steps (a setting, 64 unless a
-- session sets it). Beyond that the trigger leaves a row in workflow_work, and every worker's
-- workflow pass does it in chunks, each chunk its own short transaction: the children of a
-- fan-out of 100,000 are counted down and released a chunk at a time, the steps after a dead root
-- held a chunk at a time, and the input of a fan-in with many parents gathered outside any
-- completion. A release whose input would be larger than a step's input may be (32 MiB of its
-- dependencies' results, as JSON text) never raises inside a completion: the step is held, with
-- the reason in held_reason, and the steps after it are held too. Each trigger statement waits at
-- most 1 s for a step row locked elsewhere (an operator's open transaction, a large cancel):
-- past that the completion fails alone, and the worker writes it again by itself, while the
-- rest of its batch lands.

-- The unbounded walk over every step after a step gives way to workflow_follow below.
DROP FUNCTION __schema__.workflow_steps_after(bigint, text);

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
CREATE OR REPLACE FUNCTION __schema__.workflow_advance() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
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
