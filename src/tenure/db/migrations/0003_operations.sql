-- 0003: operations. Churn tuning for the jobs table, the indexes retention and throughput read,
-- and a registry of live workers (docs/operations.md, "Retention and bloat").

-- Every job row is updated several times (claim, heartbeats, completion) and then deleted by
-- retention, so the table is mostly dead tuples in waiting. The default autovacuum trigger (20%
-- of the table) lets millions of them pile up in a large table and the partial indexes the claim
-- scans; vacuum after 1% instead. fillfactor leaves room on each page so an updated row's new
-- version usually lands on the same page (one dirty page per transition, not two).
ALTER TABLE __schema__.jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- The indexes retention reads (jobs_finished_idx, job_events_at_idx) are built by migration 0008,
-- CONCURRENTLY, so that an upgrade does not block writes to large jobs and job_events tables.

-- One row per running worker process, refreshed every few seconds and deleted at a clean
-- shutdown: a row that stops being refreshed is a worker that died or hangs.
CREATE TABLE __schema__.workers (
    id          text PRIMARY KEY,
    queues      text[] NOT NULL,
    concurrency integer NOT NULL,
    busy        integer NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT workers_id_length CHECK (char_length(id) BETWEEN 1 AND 200),
    CONSTRAINT workers_busy_in_range CHECK (concurrency >= 1 AND busy BETWEEN 0 AND concurrency)
);
