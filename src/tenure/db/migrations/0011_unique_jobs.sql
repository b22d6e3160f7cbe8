-- 0011: unique jobs. A job enqueued with a unique key holds it while its state is one of
-- its own unique_states; a unique partial index (migration 0012, built CONCURRENTLY) keeps a
-- second job with the same key out of those states, whatever the number of concurrent
-- producers, and the enqueue returns the job that holds the key instead.

ALTER TABLE __schema__.jobs ADD COLUMN unique_key text;
ALTER TABLE __schema__.jobs ADD COLUMN unique_states __schema__.job_state[];
-- NOT VALID: every existing row has no unique key; validating would scan the table under the
-- exclusive lock this statement holds.
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_unique_scope CHECK (
    (unique_key IS NULL) = (unique_states IS NULL)
    AND (unique_key IS NULL OR (unique_states @> ARRAY['scheduled', 'pending', 'running']::__schema__.job_state[]
                                AND char_length(unique_key) BETWEEN 1 AND 500))
) NOT VALID;

-- Which job an enqueue met, for a key the caller already knows. The producer role reads no
-- idempotency keys, payloads or unique keys (they quote the payload); these answer only for the
-- one key given, so a producer learns the id of its own earlier job and nothing else.
CREATE FUNCTION __schema__.job_by_idempotency_key(key uuid)
RETURNS TABLE (id bigint, available_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT j.id, j.available_at FROM __schema__.jobs j WHERE j.idempotency_key = key $$;

CREATE FUNCTION __schema__.job_holding_unique_key(key text)
RETURNS TABLE (id bigint, available_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT j.id, j.available_at FROM __schema__.jobs j
      WHERE j.unique_key = key AND j.state = ANY(j.unique_states) $$;

REVOKE ALL ON FUNCTION __schema__.job_by_idempotency_key(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION __schema__.job_holding_unique_key(text) FROM PUBLIC;
