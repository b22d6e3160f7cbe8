"""Serving a registry in the Prometheus text format on an HTTP port."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


@dataclass
class MetricsServer:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(registry: CollectorRegistry, port: int, host: str = "0.0.0.0") -> MetricsServer:
    """Starts serving `registry` at http://host:port/metrics in a daemon thread (port 0: any free)."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread)
