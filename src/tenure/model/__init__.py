"""Values and rules: jobs, their states and options, retry and backoff, unique keys, limits,
schedules, validation, outcomes and errors. No I/O: nothing here talks to a database."""
