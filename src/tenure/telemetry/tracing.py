"""OpenTelemetry spans for enqueue, claim, run and completion, with the W3C trace context carried
in the job itself (its `trace_context` column, never the user's payload), so a trace goes on
from the request that enqueued a job to every attempt that ran it.

Optional: with `opentelemetry-api` not installed, or no tracer provider configured (the API's
default), every function here returns at once and nothing is recorded or stored."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenure.model.jobs import ClaimedJob, JobSpec

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import ProxyTracerProvider, SpanKind, Status, StatusCode
except ImportError:  # the 'otel' extra is not installed
    trace = None  # type: ignore[assignment]

#: The instrumentation scope every span is recorded under.
SCOPE = "tenure"
#: The providers of the API alone, with no SDK to record spans: a tuple made once, where a union
#: written in the check was a new object at every claim, completion and enqueue.
_NO_SDK = () if trace is None else (ProxyTracerProvider, trace.NoOpTracerProvider)


def _tracer() -> Any:
    """The tracer, or None when nothing would record a span."""
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _NO_SDK):
        return None  # no SDK configured: spans would be dropped, so make none
    return provider.get_tracer(SCOPE)


def tracing_on() -> bool:
    """A tracer provider is configured, so spans would be recorded."""
    return _tracer() is not None


def enqueue_span(specs: Sequence[JobSpec]) -> contextlib.AbstractContextManager[list[JobSpec]]:
    """A PRODUCER span around an enqueue; yields the specs carrying its trace context (the specs
    unchanged when tracing is off: a null context, which costs a few calls where a generator's
    context, made only to yield them, cost a dozen at every enqueue)."""
    tracer = _tracer()
    if tracer is None or not specs:
        return contextlib.nullcontext(list(specs))
    return _enqueue_span(tracer, specs)


@contextlib.contextmanager
def _enqueue_span(tracer: Any, specs: Sequence[JobSpec]) -> Iterator[list[JobSpec]]:
    tasks = sorted({s.task for s in specs})
    name = f"tenure enqueue {tasks[0]}" if len(tasks) == 1 else "tenure enqueue"
    with tracer.start_as_current_span(name, kind=SpanKind.PRODUCER) as span:
        span.set_attribute("messaging.system", "tenure")
        span.set_attribute("messaging.operation.type", "send")
        span.set_attribute("messaging.batch.message_count", len(specs))
        span.set_attribute("messaging.destination.name", ",".join(sorted({s.queue or "" for s in specs})))
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield [dataclasses.replace(s, trace_context=dict(carrier)) for s in specs]


#: What batch_span gives when tracing is off: one null context, used again by every batch.
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def batch_span(operation: str, queue: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """A span for one of the worker's batched statements (claim, complete); yields it (or None)
    so the caller can record the batch's size."""
    tracer = _tracer()
    if tracer is None:
        return _NO_SPAN
    return _batch_span(tracer, operation, queue)


@contextlib.contextmanager
def _batch_span(tracer: Any, operation: str, queue: str | None) -> Iterator[Any]:
    # A root of its own: a batch serves many jobs, each with its own trace.
    with tracer.start_as_current_span(
        f"tenure {operation}", context=otel_context.Context(), kind=SpanKind.CLIENT
    ) as span:
        span.set_attribute("messaging.system", "tenure")
        span.set_attribute("messaging.operation.type", "receive" if operation == "claim" else "settle")
        if queue is not None:
            span.set_attribute("messaging.destination.name", queue)
        yield span


def set_batch_size(span: Any, count: int) -> None:
    if span is not None:
        span.set_attribute("messaging.batch.message_count", count)


@contextlib.contextmanager
def run_span(job: ClaimedJob, worker: str) -> Iterator[Any]:
    """A CONSUMER span around one attempt, the child of the span that enqueued the job (the
    same parent on every attempt); yields it (or None)."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    parent = propagate.extract(job.trace_context) if job.trace_context else otel_context.Context()
    with tracer.start_as_current_span(
        f"tenure run {job.task}", context=parent, kind=SpanKind.CONSUMER, record_exception=False
    ) as span:
        span.set_attribute("messaging.system", "tenure")
        span.set_attribute("messaging.operation.type", "process")
        span.set_attribute("messaging.destination.name", job.queue)
        span.set_attribute("messaging.message.id", str(job.id))
        span.set_attribute("tenure.task", job.task)
        span.set_attribute("tenure.attempt", job.attempt)
        span.set_attribute("tenure.lease.token", job.lease.token)
        span.set_attribute("tenure.worker", worker)
        yield span


def record_outcome(span: Any, outcome: str, error: BaseException | None = None) -> None:
    """Marks the attempt's span with how it ended: 'succeeded', 'retry', 'dead', 'snoozed',
    'lease_lost', ... An error is recorded by its type only: its text may quote the payload."""
    if span is None:
        return
    span.set_attribute("tenure.outcome", outcome)
    if error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
