-- name: queue_stats
-- One row per queue and state, read from one consistent snapshot.
SELECT queue,
       state::text AS state,
       count(*) AS jobs,
       min(available_at) FILTER (WHERE state = 'pending' AND available_at <= clock.now) AS oldest_claimable_at,
       count(*) FILTER (WHERE state = 'running'
                          AND lease_expires_at <= clock.now + make_interval(secs => %(near_expiry_seconds)s))
           AS leases_near_expiry,
       clock.now AS db_now
FROM __schema__.jobs
CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS now) clock
GROUP BY queue, state, clock.now
ORDER BY queue, state;
