-- Published values (docs/workflows.md, "Publishing a value for its caller"): what a running job
-- publishes under a key for whoever enqueued it, on its workflow when it is a step, else on
-- itself (migration 0027).

-- name: job_publish
-- The lease holder publishes %(value)s under %(key)s, replacing what was there: 'published', or
-- 'lost' when the fence does not hold (nothing written). The job's row is share-locked, so a
-- recovery taking the lease meanwhile waits for this write or makes it 'lost'. Waiters are told
-- on the results channel ('published:' and the owner).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), lease AS (
    SELECT j.id, j.workflow_id
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE __part_attempt_holds__
    FOR SHARE OF j
), written AS (
    INSERT INTO __schema__.published_values AS p (workflow_id, job_id, key, value, published_at, by_job, token)
    SELECT l.workflow_id, CASE WHEN l.workflow_id IS NULL THEN l.id END, %(key)s, %(value)s::jsonb, clock.now,
           l.id, %(token)s
    FROM lease l CROSS JOIN clock
    ON CONFLICT ((coalesce(workflow_id, job_id)), (workflow_id IS NULL), key) DO UPDATE
    SET value = excluded.value, published_at = excluded.published_at, by_job = excluded.by_job,
        token = excluded.token
    RETURNING coalesce(p.workflow_id, p.job_id) AS owner, p.workflow_id IS NULL AS on_job
), told AS (
    SELECT count(pg_notify(%(results_channel)s,
                           'published:' || CASE WHEN w.on_job THEN 'job:' ELSE 'workflow:' END || w.owner)) AS n
    FROM written w
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM written) THEN 'published' ELSE 'lost' END AS outcome
FROM told;

-- name: published_get
-- The value published under %(key)s on workflow %(workflow_id)s, or on job %(job_id)s (the other
-- NULL); no row when none is.
SELECT p.key, p.value, p.published_at, p.by_job
FROM __schema__.published_values p
WHERE coalesce(p.workflow_id, p.job_id) = coalesce(%(workflow_id)s::bigint, %(job_id)s::bigint)
  AND (p.workflow_id IS NULL) = (%(workflow_id)s::bigint IS NULL)
  AND p.key = %(key)s;

-- name: published_of_workflow
-- Every value published on workflow %(id)s, by key.
SELECT p.key, p.value, p.published_at, p.by_job
FROM __schema__.published_values p
WHERE coalesce(p.workflow_id, p.job_id) = %(id)s AND (p.workflow_id IS NULL) = false
ORDER BY p.key;
