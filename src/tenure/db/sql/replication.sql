-- Whether the server acknowledges commits with a synchronous standby behind them: what `tenure
-- status`, the dashboard and the metrics report, and what `require_sync_replication` checks.
-- pg_stat_replication shows a standby's details (sync_state, flush_lsn) only to a role with the
-- privileges of pg_read_all_stats; to any other role its rows are there but blank
-- (stats_visible false), and Tenure says it cannot tell rather than guess.

-- name: gauge_replication
-- One row: the settings that decide whether a commit waits for a standby, the standbys streaming
-- (logical walsenders left out) and those counted synchronous now, and the physical replication
-- slots, which a primary keeps for standbys that are expected even while none is connected (as
-- pg_auto_failover and Patroni do).
WITH senders AS (
    SELECT r.sync_state
    FROM pg_stat_replication r
    WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots s
                      WHERE s.slot_type = 'logical' AND s.active_pid = r.pid)
)
SELECT current_setting('synchronous_standby_names') AS standby_names,
       current_setting('synchronous_commit') AS synchronous_commit,
       pg_is_in_recovery() AS in_recovery,
       pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS stats_visible,
       (SELECT count(*) FROM senders) AS standbys,
       (SELECT count(*) FROM senders WHERE sync_state IN ('sync', 'quorum')) AS synchronous,
       (SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'physical') AS physical_slots;

-- name: replication_confirmed
-- Whether a standby counted synchronous now has flushed the WAL up to %(lsn)s, or, when none is
-- given, up to where this server has written it now: past every commit this session has seen
-- acknowledged. The position is returned, so a caller waiting for the standby asks again about
-- the same one.
WITH target AS (
    SELECT coalesce(%(lsn)s::pg_lsn, pg_current_wal_lsn()) AS lsn
)
SELECT target.lsn::text AS lsn,
       EXISTS (SELECT 1 FROM pg_stat_replication r
               WHERE r.sync_state IN ('sync', 'quorum') AND r.flush_lsn >= target.lsn) AS confirmed
FROM target;
