-- 0013: global concurrency and rate limits per queue. A limited queue is claimed one claim
-- at a time (a transaction-scoped advisory lock), so the running count a claim reads is the
-- truth: at most max_running of the queue's jobs hold an unexpired lease at once, at most
-- max_running_per_key of those share the value of payload field key_field, and a token bucket
-- refilled at rate per per_seconds bounds how many start. A slot is a running job's own lease:
-- it comes back when the job finishes, or when its lease expires (a dead worker), never later.

CREATE TABLE __schema__.queue_limits (
    queue               text PRIMARY KEY,
    max_running         integer,
    key_field           text,
    max_running_per_key integer,
    rate                integer,
    per_seconds         float8,
    tokens              float8,
    refilled_at         timestamptz,
    declared_by         text NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_limits_running_positive CHECK (max_running IS NULL OR max_running >= 1),
    CONSTRAINT queue_limits_per_key CHECK (
        (key_field IS NULL) = (max_running_per_key IS NULL)
        AND (max_running_per_key IS NULL OR max_running_per_key >= 1)
        AND (key_field IS NULL OR char_length(key_field) BETWEEN 1 AND 200)
    ),
    CONSTRAINT queue_limits_rate CHECK (
        (rate IS NULL) = (per_seconds IS NULL)
        AND (rate IS NULL OR (rate >= 1 AND per_seconds > 0 AND tokens IS NOT NULL AND refilled_at IS NOT NULL))
    ),
    CONSTRAINT queue_limits_something CHECK (
        max_running IS NOT NULL OR key_field IS NOT NULL OR rate IS NOT NULL
    )
);
