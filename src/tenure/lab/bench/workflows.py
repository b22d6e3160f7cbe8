"""What a workflow step costs over a plain job, and a fan-in of 10,000 (docs/workflows.md).

Both measure Tenure's statements on one connection, as the statement sections do: claim 100,
then the fenced completion of the 100, until the queue is empty. The same number of plain jobs
is the baseline, in the same run. A step's extra cost is the jobs_workflow_advance trigger:
storing its result in its step, counting down its children, and releasing them.

- chains: workflows of CHAIN steps, each released by the completion of the one before; drained
  alone, and with their enqueue (one workflow a transaction) against plain jobs enqueued 100 to
  a statement, since a step's job is written at its release, inside the drain;
- fan-in: one workflow of FAN_IN parallel steps and a step after all of them, which receives
  all FAN_IN results. It reports how long enqueueing the workflow took, how fast the parents
  drained (each completion counts the one fan-in row down), the completion that counted the
  last parent (a fan-in of more than 64 parents has its input gathered by the workflow pass, not
  inside that completion), against the median completion of the others, and the pass's chunk
  that gathered the input;
- fan-out: one root and FAN_OUT children. Its completion releases at most 64 children; the
  workflow pass releases the rest a chunk at a time. It reports the root's completion, the
  release of every child, and the longest chunk, beside the worker's statement bound.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from psycopg.types.json import Jsonb

from tenure import Client
from tenure.db.connect import connect
from tenure.db.queries import Queries
from tenure.db.workflow_queries import WorkflowQueries
from tenure.lab.bench.sections import NOOP, reset
from tenure.lab.bench.server import SCHEMA
from tenure.lab.bench.statements import TenureStatements
from tenure.producer.workflow import Workflow
from tenure.tasks import TaskRegistry
from tenure.worker.options import WorkerOptions
from tenure.worker.workflow_pass import WORKFLOW_CHUNK

BATCH = 100
CHAIN = 5
FAN_OUT = 99_999  # and its root: the most steps a workflow may have


def _noop_step() -> Any:
    async def noop(ctx: Any) -> None:
        return None

    return TaskRegistry().register(noop, name=NOOP.task, queue=NOOP.queue or "bench")


async def _drain(dsn: str) -> tuple[int, float, list[float], list[float]]:
    """Claims and completes batches of BATCH until none is due, running the workflow pass when
    nothing is (as a worker's pass would): jobs done, seconds, the seconds of each completion
    statement and of each chunk of the pass."""
    statements, queries = TenureStatements(), Queries(SCHEMA)
    done, completions, chunks = 0, [], []
    async with await connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        while True:
            jobs = await statements.claim(conn, NOOP.queue or "bench", BATCH)
            if not jobs:
                began = time.perf_counter()
                if await queries.workflow_work_run(conn, chunk=WORKFLOW_CHUNK) is None:
                    break
                chunks.append(time.perf_counter() - began)
                continue
            began = time.perf_counter()
            await statements.complete(conn, jobs, results={(j.id, j.lease.token): Jsonb(j.id) for j in jobs})
            completions.append(time.perf_counter() - began)
            done += len(jobs)
        return done, time.perf_counter() - started, completions, chunks


async def _fan_out(dsn: str, task: Any, children: int) -> dict[str, Any]:
    """One root and `children` after it: the root's completion, then the workflow pass until
    every child is released. Nothing claims the children."""
    await reset(dsn)
    wf = Workflow("bench fan-out")
    root = wf.step(task, name="root")
    wf.group([task] * children, after=root, name="child")
    statements, queries = TenureStatements(), Queries(SCHEMA)
    async with await connect(dsn) as conn:
        await WorkflowQueries(SCHEMA).enqueue(conn, name=wf.name, on_dead="hold", steps=_stored(wf))
        await conn.commit()
    async with await connect(dsn, autocommit=True) as conn:
        [job] = await statements.claim(conn, NOOP.queue or "bench", 1)
        began = time.perf_counter()
        await statements.complete(conn, [job])
        root_seconds = time.perf_counter() - began
        chunks = []
        while True:
            began = time.perf_counter()
            if await queries.workflow_work_run(conn, chunk=WORKFLOW_CHUNK) is None:
                break
            chunks.append(time.perf_counter() - began)
        cur = await conn.execute(f"SELECT count(*) FROM {SCHEMA}.jobs WHERE workflow_step <> 'root'")
        row = await cur.fetchone()
        released = int(row[0]) if row else 0
    return {
        "fan_out": children,
        "fan_out_released": released,
        "fan_out_root_completion_ms": round(root_seconds * 1000, 2),
        "fan_out_release_seconds": round(root_seconds + sum(chunks), 2),
        "fan_out_chunks": len(chunks),
        "fan_out_longest_chunk_ms": round(max(chunks, default=0.0) * 1000, 1),
        "statement_bound_seconds": WorkerOptions().statement_bound,
    }


async def workflows(dsn: str, steps: int, fan_in: int, fan_out: int = FAN_OUT) -> dict[str, Any]:
    """Plain jobs, steps of chains and the parents of one fan-in, `steps` of each (the fan-in:
    `fan_in` parents), drained by the same loop; and the release of a fan-out of `fan_out`."""
    task = _noop_step()
    await reset(dsn)
    started = time.perf_counter()
    async with Client(dsn, schema=SCHEMA) as client:
        for _ in range(steps // BATCH):
            await client.enqueue_many([NOOP] * BATCH)
    plain_enqueue_seconds = time.perf_counter() - started
    plain, plain_seconds, _, _ = await _drain(dsn)

    await reset(dsn)
    queries = WorkflowQueries(SCHEMA)
    started = time.perf_counter()
    async with await connect(dsn, autocommit=True) as conn:
        for _ in range(steps // CHAIN):
            wf = Workflow("bench chain")
            previous = wf.step(task)
            for _ in range(CHAIN - 1):
                previous = wf.step(task, after=previous)
            await queries.enqueue(conn, name=wf.name, on_dead="hold", steps=_stored(wf))
    chain_enqueue_seconds = time.perf_counter() - started
    chained, chain_seconds, _, _ = await _drain(dsn)

    await reset(dsn)
    wf = Workflow("bench fan-in")
    parts = wf.group([task] * fan_in, name="part")
    wf.step(task.bind(), after=parts, name="fan-in", input="values")
    started = time.perf_counter()
    async with await connect(dsn) as conn:
        await queries.enqueue(conn, name=wf.name, on_dead="hold", steps=_stored(wf))
        await conn.commit()
    enqueue_seconds = time.perf_counter() - started
    parents, fan_seconds, completions, gathered = await _drain(dsn)
    # The completion before the last counted the last parent (and released the fan-in, or left
    # its input to the pass past 64 parents); the last one completed the fan-in itself.
    last, others = completions[-2], completions[:-2]
    return {
        "steps": steps,
        "plain_jobs_per_second": round(plain / plain_seconds),
        "chain_steps_per_second": round(chained / chain_seconds),
        # Enqueue and drain together: a plain job is written at its enqueue (100 to a statement,
        # as an application batching them would), a step's job at its release, inside the drain.
        "plain_us_per_job_end_to_end": round(1e6 * (plain_enqueue_seconds + plain_seconds) / plain),
        "chain_us_per_step_end_to_end": round(1e6 * (chain_enqueue_seconds + chain_seconds) / chained),
        "chain_length": CHAIN,
        "fan_in": fan_in,
        "fan_in_enqueue_seconds": round(enqueue_seconds, 3),
        "plain_enqueue_seconds_for_fan_in": round(plain_enqueue_seconds * fan_in / plain, 3),
        "fan_in_parents_per_second": round((parents - 1) / fan_seconds),
        "fan_in_release_ms": round(last * 1000, 2),
        "median_completion_ms": round(statistics.median(others) * 1000, 2) if others else None,
        "fan_in_input_gathered_ms": round(max(gathered, default=0.0) * 1000, 1),
        "drained": {"plain": plain, "chain": chained, "fan_in": parents},
        **await _fan_out(dsn, task, fan_out),
    }


def _stored(wf: Workflow) -> list[dict[str, Any]]:
    return [
        {
            "name": d.name,
            "task": NOOP.task,
            "queue": NOOP.queue,
            "payload": {},
            "after": list(d.after),
            "input_arg": d.input_arg,
            "input_kind": d.input_kind,
        }
        for d in wf.drafts
    ]
