"""Enqueueing, inspecting and controlling jobs from application code: `Client` (async, written
once) and its generated blocking twin `SyncClient`, the job builder, the control verbs' checks and
reports, and waiting for a result."""
