"""OpenTelemetry: spans for enqueue, claim, run and completion, and the trace continuing from the
request that enqueued a job to every attempt that ran it, through the job's own trace context."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tenure
import tenure.telemetry.tracing


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """An SDK provider recording in memory, seen by Tenure for this test only (the process-wide
    provider can be set once, and other tests run untraced)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tenure.telemetry.tracing.trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def stored_context(dsn: str) -> list[tuple[Any, Any]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT payload, trace_context FROM tenure.jobs ORDER BY id").fetchall()


async def run_until_done(app: tenure.Tenure, dsn: str) -> None:
    worker = app.worker(poll_interval=0.05, concurrency=2)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 30
    while any(s != "succeeded" for s in await asyncio.to_thread(states, dsn)):
        assert time.monotonic() < deadline and not running.done(), "the job did not succeed in 30 s"
        await asyncio.sleep(0.05)
    worker.stop()
    await running


def states(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT state::text FROM tenure.jobs").fetchall()]


async def test_a_trace_runs_from_the_request_through_every_attempt(
    dsn: str, spans: InMemorySpanExporter
) -> None:
    """Enqueued inside a request's span, the job stores that trace's context (beside its payload,
    not in it); both attempts' run spans are children of the enqueue span in the same trace, the
    failed one marked as an error by its type; claims and completions have spans of their own."""
    app = tenure.Tenure(dsn)
    calls = {"n": 0}

    @app.task(name="mail.send", queue="mail", backoff=tenure.Backoff(base=0.01, cap=0.01))
    def send(ctx: tenure.JobContext, to: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise tenure.Transient("the mail server said try later")

    request_tracer = trace.get_tracer(
        "the-web-app", tracer_provider=tenure.telemetry.tracing.trace.get_tracer_provider()
    )
    with request_tracer.start_as_current_span("POST /orders") as request:
        await send.enqueue(to="ann@example.com")
    try:
        await run_until_done(app, dsn)
    finally:
        await app.close()

    [(payload, context)] = stored_context(dsn)
    assert payload == {"to": "ann@example.com"} and set(context) == {"traceparent"}
    trace_id = request.get_span_context().trace_id
    assert context["traceparent"].split("-")[1] == f"{trace_id:032x}"

    finished = spans.get_finished_spans()
    [enqueue] = [s for s in finished if s.name == "tenure enqueue mail.send"]
    assert enqueue.kind is SpanKind.PRODUCER and enqueue.parent.span_id == request.get_span_context().span_id
    runs = sorted(
        (s for s in finished if s.name == "tenure run mail.send"),
        key=lambda s: s.attributes["tenure.attempt"],
    )
    assert [r.attributes["tenure.attempt"] for r in runs] == [1, 2]
    for run in runs:
        assert run.kind is SpanKind.CONSUMER and run.context.trace_id == trace_id
        assert run.parent.span_id == enqueue.context.span_id
    assert runs[0].status.status_code is StatusCode.ERROR and runs[0].attributes["error.type"] == "Transient"
    assert (
        runs[1].attributes["tenure.outcome"] == "returned" and runs[1].status.status_code is StatusCode.UNSET
    )
    assert "ann@example.com" not in str([dict(s.attributes or {}) for s in finished])
    claims = [s for s in finished if s.name == "tenure claim"]
    completes = [s for s in finished if s.name == "tenure complete"]
    assert sum(s.attributes["messaging.batch.message_count"] for s in claims) == 2
    assert completes and all(s.parent is None for s in claims + completes)


def test_a_synchronous_enqueue_carries_the_context_too(dsn: str, spans: InMemorySpanExporter) -> None:
    """enqueue_sync inside a span stores that span's trace in the job, under one PRODUCER span."""
    app = tenure.Tenure(dsn)

    @app.task(name="files.compress", queue="files")
    def compress(ctx: tenure.JobContext, folder: str) -> None: ...

    tracer = tenure.telemetry.tracing.trace.get_tracer_provider().get_tracer("script")
    try:
        with tracer.start_as_current_span("nightly") as outer:
            compress.enqueue_sync(folder="/logs")
    finally:
        app.close_sync()
    [(_, context)] = stored_context(dsn)
    assert context["traceparent"].split("-")[1] == f"{outer.get_span_context().trace_id:032x}"
    assert [s.name for s in spans.get_finished_spans()] == ["tenure enqueue files.compress", "nightly"]


async def test_with_no_tracer_provider_nothing_is_stored_or_recorded(dsn: str) -> None:
    """The API's default (no SDK configured): no trace context is written and no span is made."""
    assert tenure.telemetry.tracing._tracer() is None
    app = tenure.Tenure(dsn)

    @app.task(name="noop", queue="q")
    def noop(ctx: tenure.JobContext) -> None: ...

    try:
        await noop.enqueue()
    finally:
        await app.close()
    assert stored_context(dsn) == [({}, None)]
