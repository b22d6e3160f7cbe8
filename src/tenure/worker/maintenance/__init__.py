"""Maintenance: retention of finished jobs and audit rows, the registry of live workers, and the
vacuum of `jobs` when autovacuum's trigger for it says it is due.

Safe to run from any number of processes at once: every delete takes a bounded batch of rows
with SKIP LOCKED, so two passes share the work instead of waiting on each other.
"""

from tenure.worker.maintenance.presence import RetentionPass, WorkerPresence
from tenure.worker.maintenance.retention import PruneReport, RetentionPolicy, prune
from tenure.worker.maintenance.vacuum import JobsVacuum

__all__ = ["JobsVacuum", "PruneReport", "RetentionPass", "RetentionPolicy", "WorkerPresence", "prune"]
