-- 0014: the W3C trace context of the span that enqueued a job (traceparent, tracestate), so the
-- spans of its attempts continue that trace (docs/tracing.md). Beside the payload, never in it:
-- the handler's arguments stay the caller's own. NULL when tracing is off; a new nullable
-- column with no default costs no rewrite, and the bound is checked for new rows only (NOT
-- VALID): every existing row is NULL.

ALTER TABLE __schema__.jobs ADD COLUMN trace_context jsonb;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_trace_context_bounded CHECK (
    trace_context IS NULL
    OR (jsonb_typeof(trace_context) = 'object' AND octet_length(trace_context::text) <= 2048)
) NOT VALID;
