-- The GRANTs of Tenure's three roles on one schema, printed by `tenure roles`.
-- {schema} and {role} are filled in with quoted identifiers. What these privileges enforce, and
-- what only the fencing protocol enforces, is written down in docs/security.md.

-- name: producer
-- Enqueue only, through enqueue() alone (docs/sql.md): a SECURITY DEFINER function that checks
-- and completes each job the way the Python client does (its task's declared policy, a unique key
-- scoped to its own task, the bounds) and answers only for the job it was asked to enqueue. The
-- role may not write or read jobs itself, so it cannot choose a job's state, hold another task's
-- unique key, or ask whether a job with some payload exists without enqueuing one. The REVOKEs
-- first make applying this again take back what an older version granted (raw INSERT columns,
-- the key look-up functions).
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {role};
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT EXECUTE ON FUNCTION {schema}.enqueue(text, jsonb, text, timestamptz, float8, integer, integer, text, uuid,
                                           text, {schema}.job_state[], float8, boolean, jsonb, boolean)
    TO {role};
-- Workflows come in through enqueue_workflow() alone, a SECURITY DEFINER function as enqueue().
GRANT EXECUTE ON FUNCTION {schema}.enqueue_workflow(text, jsonb, text) TO {role};
-- Signals come in through signal() alone, a SECURITY DEFINER function: the role cannot read the
-- mailbox, nor what any job was sent, nor end a wait but by a signal to its key.
GRANT EXECUTE ON FUNCTION {schema}.signal(text, jsonb, text, float8, text, text) TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};

-- name: worker
-- Claim, heartbeat, complete, fail, recover expired leases, fire schedules. It may rewrite only
-- the lease and outcome columns of jobs: never a job's payload, queue, task, priority or attempt
-- budget, and it may not delete jobs. It inserts jobs only as its scheduler does (the columns a
-- fresh waiting job has, as the producer's grant: the CHECK constraints make any such row a job
-- nobody claimed yet). No DDL: no CREATE on the schema, no ownership.
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {schema} FROM {role};
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.jobs TO {role};
GRANT UPDATE (state, available_at, attempt_count, lease_owner, lease_token, lease_expires_at,
              lease_deadline, progress, last_error_code, last_error, attempted_at, finished_at,
              result, snoozes, unique_states)
    ON {schema}.jobs TO {role};
-- Waits: a handler's wait records itself and takes a signal kept in the mailbox for its key; the
-- promotion pass ends waits at their deadline; the recovery pass runs signals_sweep. A handler
-- may signal another job, as a producer does. (unique_states above: a job enqueued before waits
-- existed holds its unique key while waiting too, which its wait writes.)
GRANT SELECT, INSERT, UPDATE ON {schema}.job_waits TO {role};
GRANT SELECT, UPDATE (job_id, delivered_at, swept) ON {schema}.signals TO {role};
GRANT EXECUTE ON FUNCTION {schema}.signal(text, jsonb, text, float8, text, text) TO {role};
GRANT EXECUTE ON FUNCTION {schema}.signals_sweep(integer) TO {role};
-- A step's condition whose deadline skips or cancels it: the promotion pass ends it through one
-- SECURITY DEFINER function (a cancel is otherwise the admin's), for due waits only.
GRANT EXECUTE ON FUNCTION {schema}.waits_due_to_skip_or_cancel(integer, timestamptz) TO {role};
GRANT SELECT, INSERT ON {schema}.job_events TO {role};
GRANT SELECT, INSERT, UPDATE ON {schema}.job_effects TO {role};
-- A handler's published values (ctx.publish): written under its job's fence, read back by the app.
GRANT SELECT, INSERT, UPDATE ON {schema}.published_values TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.workers TO {role};
-- Its offer of a slot to the next lone job (docs/hand-off.md): made, renewed and withdrawn by the
-- worker itself. Taking one is an INSERT of a running job, which only a role that inserts jobs
-- with every column (the application's own, the admin) does; the producer role's enqueue() does
-- not, and its jobs are claimed.
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.worker_offers TO {role};
-- Reads queue pauses (the claim honours them) but may not write them: pausing, and cancelling
-- (which the jobs_cancel_guard trigger allows only to a role that may pause), are the admin's.
GRANT SELECT ON {schema}.queue_pauses TO {role};
-- Limits: a worker writes its app's declaration at start, and a limited claim its bucket.
GRANT SELECT, INSERT, UPDATE ON {schema}.queue_limits TO {role};
-- The task catalog: a worker declares its app's tasks at start (what enqueue() completes from).
GRANT SELECT, INSERT, UPDATE ON {schema}.task_policies TO {role};
-- A handler enqueues follow-up jobs through enqueue(), as a producer does.
GRANT EXECUTE ON FUNCTION {schema}.enqueue(text, jsonb, text, timestamptz, float8, integer, integer, text, uuid,
                                           text, {schema}.job_state[], float8, boolean, jsonb, boolean)
    TO {role};
-- A handler may enqueue a workflow too. A step's progress (its children released, the steps
-- after a dead one held) is the jobs_workflow_advance trigger's, which needs no grant of the role.
GRANT EXECUTE ON FUNCTION {schema}.enqueue_workflow(text, jsonb, text) TO {role};
-- The workflow pass: the work a completion left for later (a large fan-out's release, the steps
-- after a dead root), a chunk at a time, through one SECURITY DEFINER function.
GRANT EXECUTE ON FUNCTION {schema}.workflow_work_run(integer) TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};
-- The scheduler (docs/schedules.md): it registers its app's schedules, fires their slots as jobs
-- and records each fired slot. It may not pause or resume a schedule (the pause columns are the
-- admin's), change a schedule's key namespace, or delete schedules or their history.
GRANT INSERT (queue, task, payload, priority, available_at, state, max_attempts, created_at,
              idempotency_key)
    ON {schema}.jobs TO {role};
GRANT SELECT ON {schema}.schedules TO {role};
GRANT INSERT (name, task, queue, cron, timezone, payload, priority, max_attempts, missed, last_slot,
              created_at, updated_at, declared_at)
    ON {schema}.schedules TO {role};
GRANT UPDATE (task, queue, cron, timezone, payload, priority, max_attempts, missed, last_slot,
              last_fired_slot, updated_at, declared_at)
    ON {schema}.schedules TO {role};
GRANT SELECT, INSERT ON {schema}.schedule_fires TO {role};

-- name: admin
-- Migrations and operations: dead jobs (inspect, reprocess, prune), cancel and revoke, pause. Run `tenure migrate`
-- as this role from the start, so it owns the schema and every object in it: ALTER and DROP
-- belong to owners and cannot be granted.
GRANT USAGE, CREATE ON SCHEMA {schema} TO {role};
GRANT ALL PRIVILEGES ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT ALL PRIVILEGES ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};
