-- Workflows (docs/workflows.md): enqueueing one, reading its steps, and the operator's cancel.
-- A step's progress itself is written by the jobs_workflow_advance trigger (migration 0018), in
-- the transaction of whichever statement moves the step's job.

-- name: workflow_enqueue
-- Through enqueue_workflow(), the one way in for every role: the steps as JSON (see that
-- function for their fields). Each step's job id comes back with its name.
SELECT w.workflow_id, w.step, w.job_id
FROM __schema__.enqueue_workflow(%(name)s, %(steps)s::jsonb, %(on_dead)s) w;

-- part: workflow_summary
-- One workflow with its steps counted by state (w: the workflows rows in scope). A step whose
-- job exists counts by the job's live state: pending (or scheduled), running, and waiting.
SELECT w.id, w.name, w.on_dead, w.created_at, w.cancelled_at, w.cancelled_by, w.cancel_reason,
       count(*) AS steps,
       count(*) FILTER (WHERE s.state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE s.state = 'released' AND j.state = 'running') AS running,
       count(*) FILTER (WHERE s.state = 'released' AND coalesce(j.state::text, '') NOT IN ('running', 'waiting'))
           AS queued,
       -- Waiting: for its dependencies, or released and waiting for a signal or a time (its
       -- condition, or its handler's wait).
       count(*) FILTER (WHERE s.state = 'waiting' OR (s.state = 'released' AND j.state = 'waiting')) AS waiting,
       count(*) FILTER (WHERE s.state = 'held') AS held,
       count(*) FILTER (WHERE s.state = 'dead') AS dead,
       count(*) FILTER (WHERE s.state = 'cancelled') AS cancelled,
       max(s.finished_at) AS last_finished_at,
       statement_timestamp() AS db_now
FROM w
JOIN __schema__.workflow_steps s ON s.workflow_id = w.id
LEFT JOIN __schema__.jobs j ON j.id = s.job_id AND s.state = 'released'
GROUP BY w.id, w.name, w.on_dead, w.created_at, w.cancelled_at, w.cancelled_by, w.cancel_reason
ORDER BY w.id DESC

-- name: workflow_list
-- The latest workflows, newest first, each counted by its steps' states.
WITH w AS (
    SELECT * FROM __schema__.workflows ORDER BY id DESC LIMIT %(limit)s
)
__part_workflow_summary__;

-- name: workflow_get
WITH w AS (
    SELECT * FROM __schema__.workflows WHERE id = %(id)s
)
__part_workflow_summary__;

-- name: workflow_steps
-- A workflow's steps in the order they were declared (their job ids were drawn in it), each with
-- the steps it waits for and, once released, its job's live state and last error (a held step's
-- own reason, when it has one).
SELECT s.name, s.task, s.queue, s.job_id, s.state, j.state::text AS job_state,
       coalesce(j.attempt_count, 0) AS attempts, s.max_attempts, s.remaining,
       coalesce((SELECT array_agg(e.parent ORDER BY e.position) FROM __schema__.workflow_edges e
                 WHERE e.workflow_id = s.workflow_id AND e.child = s.name), '{}') AS after,
       s.input_arg, s.released_at, j.attempted_at, s.finished_at,
       -- A step held for a reason of its own (its input over its bound) has no job: its reason
       -- is shown as the step's error, its code the reason's first word.
       coalesce(j.last_error_code, CASE WHEN s.state = 'held' THEN split_part(s.held_reason, ':', 1) END)
           AS last_error_code,
       coalesce(j.last_error, CASE WHEN s.state = 'held' THEN s.held_reason END) AS last_error,
       -- The step's condition (migration 0026), and its wait once the step is released: waiting
       -- since when and until when, or how it ended.
       s.condition, cw.state AS condition_state, cw.since AS condition_since,
       cw.deadline AS condition_deadline
FROM __schema__.workflow_steps s
LEFT JOIN __schema__.jobs j ON j.id = s.job_id
LEFT JOIN __schema__.job_waits cw ON cw.job_id = s.job_id AND cw.name = '@step'
WHERE s.workflow_id = %(id)s
ORDER BY s.job_id
LIMIT %(limit)s;

-- name: workflow_cancel_mark
-- The first statement of cancelling a workflow: the workflow is marked cancelled, with who and
-- why, and its steps not released yet are counted. The outcome is 'already' when it was
-- cancelled before, and 'finished' when every step has finished (succeeded, dead or cancelled):
-- such a workflow has nothing left to cancel, and marking it would only stop its retry, so it is
-- left as it is. Only the workflow's own row is locked here: the statements
-- that follow lock its live step jobs before its steps, in the order a completion locks them
-- (its job, then the steps after it), so that a cancel and a completion never wait on each other
-- in a circle.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), marked AS (
    UPDATE __schema__.workflows w
    SET cancelled_at = clock.now, cancelled_by = %(actor)s, cancel_reason = %(reason)s
    FROM clock
    WHERE w.id = %(id)s AND w.cancelled_at IS NULL
      AND EXISTS (SELECT 1 FROM __schema__.workflow_steps s
                  WHERE s.workflow_id = w.id AND s.state IN ('waiting', 'held', 'released'))
    RETURNING w.id
)
SELECT w.id,
       CASE WHEN EXISTS (SELECT 1 FROM marked) THEN 'cancelled'
            WHEN w.cancelled_at IS NOT NULL THEN 'already'
            ELSE 'finished' END AS outcome,
       (SELECT count(*) FROM __schema__.workflow_steps s
        WHERE s.workflow_id = w.id AND s.state IN ('waiting', 'held')) AS not_released
FROM __schema__.workflows w
WHERE w.id = %(id)s;

-- name: workflow_cancel_waiting
-- Every step of the workflow still waiting or held is cancelled, locked in name order. A release
-- racing with this waits on the step's row lock and then finds it cancelled, or has already made
-- a job, which workflow_live_jobs, run again after this, finds.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), locked AS (
    SELECT s.workflow_id, s.name FROM __schema__.workflow_steps s
    WHERE s.workflow_id = %(id)s AND s.state IN ('waiting', 'held')
    ORDER BY s.name
    FOR UPDATE OF s
)
UPDATE __schema__.workflow_steps s
SET state = 'cancelled', finished_at = clock.now
FROM locked l CROSS JOIN clock
WHERE s.workflow_id = l.workflow_id AND s.name = l.name AND s.state IN ('waiting', 'held')
RETURNING s.name;

-- name: workflow_live_jobs
-- The jobs of a workflow's released steps that have not finished, locked (in id order) so that
-- none finishes before the job-control statement that follows cancels or revokes it.
SELECT j.id
FROM __schema__.workflow_steps s
JOIN __schema__.jobs j ON j.id = s.job_id
WHERE s.workflow_id = %(id)s AND s.state = 'released'
  -- Not finished: queued, running or waiting for a signal or a time.
  AND j.state NOT IN ('succeeded', 'dead', 'cancelled')
ORDER BY j.id
FOR UPDATE OF j;

-- name: workflow_failed_jobs
-- The jobs of a workflow's dead steps, and of steps whose job was cancelled on its own: what a
-- retry of the workflow reprocesses.
SELECT s.job_id AS id
FROM __schema__.workflow_steps s
JOIN __schema__.jobs j ON j.id = s.job_id
WHERE s.workflow_id = %(id)s AND s.state IN ('dead', 'cancelled') AND j.state IN ('dead', 'cancelled')
ORDER BY s.job_id;

-- name: workflow_step_unreleased
-- The state of the workflow step whose job id this is, while its job does not exist yet
-- (waiting or held for earlier steps, or cancelled before it ran): what a caller waiting for that
-- job's result is told. No row: no such step, or its job exists.
SELECT s.state
FROM __schema__.workflow_steps s
WHERE s.job_id = %(id)s AND s.state IN ('waiting', 'held', 'cancelled')
  AND NOT EXISTS (SELECT 1 FROM __schema__.jobs j WHERE j.id = s.job_id);

-- name: workflow_work_run
-- One chunk of the workflow pass (workflow_work_run(), migration 0020): the oldest piece of a
-- workflow's work that its completion left for later, at most %(chunk)s steps of it. No row:
-- nothing is due.
SELECT w.kind, w.workflow_id, w.step, w.outcome
FROM __schema__.workflow_work_run(%(chunk)s) w;

-- name: workflow_rebuild_purged
-- A retry's first statement: the jobs of dead or cancelled steps that were purged since are made
-- again from their steps' rows (workflow_rebuild_purged(), migration 0020).
SELECT r.step, r.job_id FROM __schema__.workflow_rebuild_purged(%(id)s) r;

-- name: workflow_held_reasons
-- The steps held for a reason of their own (an input over its bound), which no retry mends.
SELECT s.name, s.held_reason FROM __schema__.workflow_steps s
WHERE s.workflow_id = %(id)s AND s.state = 'held' AND s.held_reason IS NOT NULL
ORDER BY s.job_id;
