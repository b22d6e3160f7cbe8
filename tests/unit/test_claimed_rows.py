"""How a claimed row becomes the job a worker runs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tenure.db.job_rows import UNREADABLE
from tenure.db.queries import CLAIM_COLUMNS, claimed_job
from tenure.model.jobs import ClaimedJob, Lease
from tenure.model.secrets import has_secret_refs


def _row(payload: str = '{"to": "a@b"}') -> tuple[object, ...]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    values = {
        "id": 7, "queue": "mail", "task": "send", "payload": payload, "priority": 3,
        "attempt_count": 2, "max_attempts": 5, "lease_token": 9, "lease_expires_at": now + timedelta(30),
        "lease_deadline": now + timedelta(3600), "progress": {"step": 1}, "idempotency_key": uuid.UUID(int=1),
        "available_at": now - timedelta(1), "created_at": now - timedelta(2), "db_now": now,
        "result_wanted": True, "snoozes": 4, "trace_context": {"traceparent": "00-x"},
    }  # fmt: skip
    return tuple(values[name] for name in CLAIM_COLUMNS)


def test_claimed_row_fills_every_field_of_the_job_and_its_lease_by_name() -> None:
    """Each claimed column lands in the field of its name (the payload decoded from its text), the
    lease's three in the lease."""
    row = dict(zip(CLAIM_COLUMNS, _row(), strict=True))
    job = claimed_job(_row(), "worker-1")
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
        secret_refs=False,
    )
    assert job == expected
    assert type(job) is ClaimedJob and type(job.lease) is Lease
    assert len(job) == len(ClaimedJob._fields) and len(job.lease) == len(Lease._fields)


def test_claimed_job_and_its_lease_cannot_be_changed() -> None:
    """A handler cannot rewrite the job it was given, nor the lease its writes are fenced by."""
    job = claimed_job(_row(), "worker-1")
    with pytest.raises(AttributeError):
        job.lease.token = 10  # type: ignore[misc]
    with pytest.raises(AttributeError):
        job.attempt = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("payload", "refs"),
    [
        ('{"to": "a@b"}', False),
        ('{"key": {"$secret": "stripe"}}', True),
        ('{"items": [1, {"deep": [{"$secret": "smtp"}]}]}', True),
        # The key's text in a value, or a dict that is not a reference: the walk says no.
        ('{"note": "$secret"}', False),
        ('{"key": {"$secret": "stripe", "other": 1}}', False),
        ('{"key": {"$secret": 5}}', False),
    ],
)
def test_claimed_job_says_whether_its_payload_holds_secret_references(payload: str, refs: bool) -> None:
    """A claimed job knows whether its payload holds a secret reference, the same answer a walk of
    the decoded payload gives, so the worker resolves exactly those."""
    job = claimed_job(_row(payload), "worker-1")
    assert job.secret_refs is refs
    assert has_secret_refs(job.payload) is refs


def test_unreadable_payload_raises_for_its_row_alone() -> None:
    """A payload this client cannot decode raises from its own row, which the claim sets aside."""
    with pytest.raises(UNREADABLE):
        claimed_job(_row("[" * 100_000 + "]" * 100_000), "worker-1")
