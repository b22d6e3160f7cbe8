-- The GRANTs of Tenure's three roles on one schema, printed by `tenure roles`.
-- {schema} and {role} are filled in with quoted identifiers. What these privileges enforce, and
-- what only the fencing protocol enforces, is written down in docs/security.md.

-- name: producer
-- Enqueue only: insert the columns an enqueue sets (also through COPY) and read back the two an
-- insert returns. Every other column takes its default, and the CHECK constraints tie state,
-- lease, attempts and finish time together, so any row this role can write is a waiting job
-- (pending, or scheduled for later) nobody has claimed: it cannot forge a running or finished
-- job, and it reads no payload,
-- error or idempotency key. The REVOKE first makes applying this again tighten an older grant.
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT INSERT (queue, task, payload, priority, available_at, state, max_attempts, created_at,
              ordering_key, idempotency_key, result_wanted, unique_key, unique_states, trace_context)
    ON {schema}.jobs TO {role};
GRANT SELECT (id, available_at) ON {schema}.jobs TO {role};
-- Which stored job an idempotent or unique enqueue met: answered only for the one key given.
GRANT EXECUTE ON FUNCTION {schema}.job_by_idempotency_key(uuid), {schema}.job_holding_unique_key(text)
    TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};

-- name: worker
-- Claim, heartbeat, complete, fail, recover expired leases, fire schedules. It may rewrite only
-- the lease and outcome columns of jobs: never a job's payload, queue, task, priority or attempt
-- budget, and it may not delete jobs. It inserts jobs only as its scheduler does (the columns a
-- fresh waiting job has, as the producer's grant: the CHECK constraints make any such row a job
-- nobody claimed yet). No DDL: no CREATE on the schema, no ownership.
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.jobs TO {role};
GRANT UPDATE (state, available_at, attempt_count, lease_owner, lease_token, lease_expires_at,
              lease_deadline, progress, last_error_code, last_error, attempted_at, finished_at,
              result, snoozes)
    ON {schema}.jobs TO {role};
GRANT SELECT, INSERT ON {schema}.job_events TO {role};
GRANT SELECT, INSERT, UPDATE ON {schema}.job_effects TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.workers TO {role};
-- Reads queue pauses (the claim honours them) but may not write them: pausing, and cancelling
-- (which the jobs_cancel_guard trigger allows only to a role that may pause), are the admin's.
GRANT SELECT ON {schema}.queue_pauses TO {role};
-- Limits: a worker writes its app's declaration at start, and a limited claim its bucket.
GRANT SELECT, INSERT, UPDATE ON {schema}.queue_limits TO {role};
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
