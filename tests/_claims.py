"""job_claim's parameters, for tests that run the claim's own text (a prepared statement, an
EXPLAIN): up to 100 jobs of queue q for worker w, ten of them by age."""

from __future__ import annotations

from typing import Any

CLAIM_ARGS: dict[str, Any] = {
    "queue": "q",
    "owner": "w",
    "limit": 100,
    "oldest": 10,
    "by_priority": 90,
    "tasks": None,
    "only": None,
    "default_lease_seconds": 30.0,
    "default_runtime_seconds": 60.0,
    "policy_tasks": [],
    "policy_leases": [],
    "policy_runtimes": [],
    "now": None,
}
