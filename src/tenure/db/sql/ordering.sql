-- Per-key ordering, the operator's side: what blocks a key, and skipping a dead head.

-- name: ordering_blocked
-- Dead keyed jobs, with how many jobs of their key wait behind them. A dead job blocks its
-- key until it is reprocessed (and succeeds) or skipped.
SELECT d.id, d.ordering_key, d.queue, d.task, d.last_error_code, d.finished_at,
       (SELECT count(*) FROM __schema__.jobs w
        WHERE w.ordering_key = d.ordering_key AND w.state IN ('scheduled', 'pending') AND w.id > d.id)
           AS waiting
FROM __schema__.jobs d
WHERE d.state = 'dead'
  AND d.ordering_key IS NOT NULL
  AND (%(ordering_key)s::text IS NULL OR d.ordering_key = %(ordering_key)s::text)
ORDER BY d.finished_at, d.id
LIMIT %(limit)s;
