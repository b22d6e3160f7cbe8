"""`tenure bench`: throughput, latency, backlog, recovery and cost figures, each as a ratio against
a baseline measured in the same run (see docs/performance.md)."""
