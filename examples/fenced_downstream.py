"""Fencing a store outside Tenure's transaction with the job's token.

`ctx.atomic` fences writes to the queue's own database. For any other store, pass `ctx.token`
along and let the store refuse a write whose token is older than the last one it accepted for
the same job: a worker that was paused past its lease (token 1) then cannot overwrite what the
attempt that replaced it (token 2) wrote.

Tokens count the claims of ONE job, so the guard compares them per job id, never across jobs.
"""

from __future__ import annotations

from typing import Any

import psycopg

import tenure

DDL = """
CREATE TABLE IF NOT EXISTS public.report_outputs (
    job_id      bigint PRIMARY KEY,
    body        text NOT NULL,
    fence_token bigint NOT NULL
)"""

# Inserts the first write, and replaces an existing one only for the same or a newer token.
FENCED_UPSERT = """
INSERT INTO public.report_outputs (job_id, body, fence_token) VALUES (%(job_id)s, %(body)s, %(token)s)
ON CONFLICT (job_id) DO UPDATE SET body = excluded.body, fence_token = excluded.fence_token
WHERE report_outputs.fence_token <= excluded.fence_token
RETURNING job_id"""


class StaleToken(tenure.Permanent):
    """The store holds a newer attempt's output: this attempt must stop."""


def write_output(conn: psycopg.Connection[Any], job_id: int, token: int, body: str) -> None:
    """Writes the output of one attempt, refusing it if a newer attempt already wrote."""
    with conn.transaction():
        row = conn.execute(FENCED_UPSERT, {"job_id": job_id, "body": body, "token": token}).fetchone()
    if row is None:
        raise StaleToken(f"job {job_id}: token {token} is older than the stored output's", code="STALE_TOKEN")


app = tenure.Tenure()


@app.task(name="reports.build")
def build_report(ctx: tenure.JobContext, report: str, store_dsn: str) -> None:
    body = f"report {report}, built by attempt {ctx.attempt}"
    with psycopg.connect(store_dsn, autocommit=True) as store:
        write_output(store, ctx.job_id, ctx.token, body)
