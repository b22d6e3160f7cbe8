"""How a claimed row becomes the job a worker runs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tenure.db.queries import CLAIM_COLUMNS, _claimed_job
from tenure.model.jobs import ClaimedJob, Lease


def _row() -> tuple[object, ...]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    values = {
        "id": 7, "queue": "mail", "task": "send", "payload": {"to": "a@b"}, "priority": 3,
        "attempt_count": 2, "max_attempts": 5, "lease_token": 9, "lease_expires_at": now + timedelta(30),
        "lease_deadline": now + timedelta(3600), "progress": {"step": 1}, "idempotency_key": uuid.UUID(int=1),
        "available_at": now - timedelta(1), "created_at": now - timedelta(2), "db_now": now,
        "result_wanted": True, "snoozes": 4, "trace_context": {"traceparent": "00-x"},
    }  # fmt: skip
    return tuple(values[name] for name in CLAIM_COLUMNS)


def test_claimed_row_fills_every_field_of_the_job_and_its_lease_by_name() -> None:
    """Each claimed column lands in the field of its name, the lease's three in the lease."""
    row = dict(zip(CLAIM_COLUMNS, _row(), strict=True))
    job = _claimed_job(_row(), "worker-1")
    expected = ClaimedJob(
        id=7,
        queue="mail",
        task="send",
        payload={"to": "a@b"},
        priority=3,
        attempt=2,
        max_attempts=5,
        lease=Lease(7, "worker-1", 9, row["lease_expires_at"], row["lease_deadline"]),  # type: ignore[arg-type]
        progress={"step": 1},
        idempotency_key=uuid.UUID(int=1),
        available_at=row["available_at"],  # type: ignore[arg-type]
        created_at=row["created_at"],  # type: ignore[arg-type]
        db_now=row["db_now"],  # type: ignore[arg-type]
        result_wanted=True,
        snoozes=4,
        trace_context={"traceparent": "00-x"},
    )
    assert job == expected
    assert type(job) is ClaimedJob and type(job.lease) is Lease
    assert len(job) == len(ClaimedJob._fields) and len(job.lease) == len(Lease._fields)


def test_claimed_job_and_its_lease_cannot_be_changed() -> None:
    """A handler cannot rewrite the job it was given, nor the lease its writes are fenced by."""
    job = _claimed_job(_row(), "worker-1")
    with pytest.raises(AttributeError):
        job.lease.token = 10  # type: ignore[misc]
    with pytest.raises(AttributeError):
        job.attempt = 1  # type: ignore[misc]
