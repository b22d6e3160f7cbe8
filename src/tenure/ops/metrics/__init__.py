"""Prometheus metrics: runtime events from a worker, state gauges from the database.

Needs the `metrics` extra (`pip install 'tenure[metrics]'`). `RuntimeMetrics` subscribes to a
worker's events; `DatabaseCollector` reads the whole cluster's gauges once per scrape from one
snapshot; `serve` exposes a registry in the Prometheus text format. docs/metrics.md lists every
metric and what it means.
"""

from tenure.ops.metrics.database import DatabaseCollector
from tenure.ops.metrics.exporter import MetricsServer, serve
from tenure.ops.metrics.runtime import RuntimeMetrics

__all__ = ["DatabaseCollector", "MetricsServer", "RuntimeMetrics", "serve"]
