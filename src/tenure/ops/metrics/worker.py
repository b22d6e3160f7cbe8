"""Attaching metrics to a worker: its runtime events plus the database gauges, on one port."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from tenure.ops.metrics.database import DatabaseCollector
from tenure.ops.metrics.exporter import MetricsServer, serve
from tenure.ops.metrics.runtime import RuntimeMetrics
from tenure.worker.worker import Worker


@dataclass
class WorkerMetrics:
    registry: CollectorRegistry
    runtime: RuntimeMetrics
    database: DatabaseCollector | None
    server: MetricsServer | None

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.database is not None:
            self.database.close()


def attach(
    worker: Worker,
    *,
    dsn: str,
    port: int | None,
    host: str = "0.0.0.0",
    database_gauges: bool = True,
) -> WorkerMetrics:
    """Subscribes runtime metrics to `worker` (call before `worker.run()`); serves them with the
    database gauges on `port` (0: any free port, None: do not serve)."""
    registry = CollectorRegistry()

    def busy() -> int:
        return len(worker.executor.running) if worker.executor is not None else 0

    runtime = RuntimeMetrics(registry, busy=busy, concurrency=worker.options.concurrency)
    worker.events.subscribe(runtime)
    database = None
    if database_gauges:
        database = DatabaseCollector(dsn, worker.schema, application_name="tenure-worker-metrics")
        registry.register(database)
    server = serve(registry, port, host) if port is not None else None
    return WorkerMetrics(registry, runtime, database, server)
