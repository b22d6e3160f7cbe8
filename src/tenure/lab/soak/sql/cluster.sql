-- The pg_auto_failover cluster of the soak's `failover` topology: the monitor's view, settings.

-- name: cluster_node_states
SELECT nodename AS name, reportedstate::text AS reported, goalstate::text AS goal
FROM pgautofailover.node;

-- name: cluster_alter_system
ALTER SYSTEM SET {name} = {value};

-- name: cluster_reload_conf
SELECT pg_reload_conf() AS reloaded;

-- name: cluster_synchronous_settings
SELECT current_setting('synchronous_standby_names') AS names,
       current_setting('synchronous_commit') AS commit;

-- name: cluster_clock
SELECT clock_timestamp() AS now;
