"""The LISTEN/NOTIFY channels of a schema and what their payloads carry."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema; the payload is the queue name, or a scheduled hint."""
    return f"tenure:{schema}"[:63]


#: A NOTIFY payload that starts with this is not a queue (no queue name can start with it): jobs
#: were scheduled, the earliest due at the epoch seconds that follow (database time).
SCHEDULED_PREFIX = "*"


#: A NOTIFY payload that starts with this tells workers a running job was revoked:
#: "<prefix><job id>:<the revoked token>". No queue name can start with it either.
REVOKE_PREFIX = "!"


def revoke_hint(payload: str) -> tuple[int, int] | None:
    """The (job id, revoked token) a revoke notice carries, or None when `payload` is not one."""
    if not payload.startswith(REVOKE_PREFIX):
        return None
    job_id, _, token = payload[len(REVOKE_PREFIX) :].partition(":")
    try:
        return int(job_id), int(token)
    except ValueError:
        return None


def scheduled_hint(payload: str) -> datetime | None:
    """The due time a scheduled hint carries, or None when `payload` is not one."""
    if not payload.startswith(SCHEDULED_PREFIX):
        return None
    try:
        return datetime.fromtimestamp(float(payload[len(SCHEDULED_PREFIX) :]), tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def offer_channel(schema: str, worker: str) -> str:
    """The channel a worker's offer is answered on (handoff.sql): a job that took the offer, as
    JSON. Its own, so that no other worker hears the job."""
    digest = hashlib.blake2s(f"{schema}\0{worker}".encode(), digest_size=10).hexdigest()
    return f"tenure.offer:{digest}"


def results_channel(schema: str) -> str:
    """The channel job results are announced on (payload: the job id), apart from the workers'
    channel, so callers waiting for results never wake a worker."""
    return f"tenure.results:{schema}"[:63]
