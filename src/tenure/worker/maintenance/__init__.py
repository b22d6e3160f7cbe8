"""Maintenance: retention of finished jobs and audit rows, and the registry of live workers.

Safe to run from any number of processes at once: every delete takes a bounded batch of rows
with SKIP LOCKED, so two passes share the work instead of waiting on each other.
"""

from tenure.worker.maintenance.presence import RetentionPass, WorkerPresence
from tenure.worker.maintenance.retention import PruneReport, RetentionPolicy, prune

__all__ = ["PruneReport", "RetentionPass", "RetentionPolicy", "WorkerPresence", "prune"]
