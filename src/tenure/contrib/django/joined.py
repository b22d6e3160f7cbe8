"""Enqueueing inside Django's transaction: the job commits or rolls back with the view's writes.

Django's PostgreSQL backend, with psycopg 3 installed, talks to the database through a real
`psycopg.Connection`, so Tenure inserts the job on that very connection: inside `atomic()` it is
part of the same transaction as the ORM's writes. That is stronger than
`transaction.on_commit(enqueue)`, which leaves a window between the data's commit and the job's
insert in which a crash loses the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Unpack

import psycopg
from django.db import connections, transaction
from psycopg import conninfo

from tenure.contrib.django.settings import dsn_from_database, tenure_settings
from tenure.db.connect import describe_dsn
from tenure.model.errors import ConfigurationError
from tenure.model.jobs import EnqueuedJob
from tenure.producer.client_support import JoiningClient
from tenure.tasks import EnqueueOptions, P, Task

PSYCOPG2_REFUSED = (
    "Django's database {alias!r} is reached through psycopg2, whose connections Tenure cannot use: "
    "install psycopg 3 (pip install 'psycopg[binary]'), which Django's PostgreSQL backend then uses "
    "instead, so that jobs join the ORM's transaction. Until then enqueue after the commit with "
    "transaction.on_commit(lambda: task.enqueue_sync(...)), which loses the job if the process dies "
    "between the commit and the enqueue"
)


def psycopg_connection_of(raw: object, alias: str) -> psycopg.Connection[Any]:
    """`raw`, the driver connection behind Django's database `alias`, if it is psycopg 3's."""
    if isinstance(raw, psycopg.Connection):
        return raw
    driver = type(raw).__module__.partition(".")[0]
    if driver == "psycopg2":
        raise ConfigurationError(PSYCOPG2_REFUSED.format(alias=alias))
    raise ConfigurationError(
        f"Django's database {alias!r} is reached through {driver} ({type(raw).__qualname__}), not "
        "psycopg 3, so a job cannot join its transaction: point TENURE['DATABASE'] at a PostgreSQL "
        "entry of DATABASES (ENGINE django.db.backends.postgresql, with psycopg 3 installed)"
    )


def django_connection(using: str | None = None) -> psycopg.Connection[Any]:
    """The psycopg 3 connection of Django's database `using` (default: `TENURE["DATABASE"]`),
    connected, in whatever transaction Django has open on it. Refuses a transaction that Django
    has marked for rollback (a query already failed in this atomic block), as the ORM does."""
    alias = using or tenure_settings().database
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            f"Django's database {alias!r} is {wrapper.vendor}, not PostgreSQL: Tenure's jobs live in "
            "PostgreSQL, so they cannot join its transactions; set TENURE['DATABASE'] to a PostgreSQL "
            "entry of DATABASES"
        )
    wrapper.ensure_connection()
    wrapper.validate_no_broken_transaction()
    return psycopg_connection_of(wrapper.connection, alias)


CANNOT_JOIN = (
    "a blocking enqueue inside Django's atomic() on database {alias!r} cannot join its transaction: "
    "{why}, so the job would commit on its own even if the block rolled back. {fix}, or enqueue "
    "after the commit with transaction.on_commit(lambda: task.enqueue_sync(...)), which loses the "
    "job if the process dies between the commit and the enqueue"
)


def _server_and_database(dsn: str) -> tuple[str, str, str]:
    parts = conninfo.conninfo_to_dict(dsn)
    host = str(parts.get("host") or "localhost")
    return host, str(parts.get("port") or "5432"), str(parts.get("dbname") or parts.get("user") or "")


@contextlib.contextmanager
def open_transaction(client: JoiningClient) -> Iterator[psycopg.Connection[Any] | None]:
    """What a blocking enqueue given no `conn` joins (`tenure.producer.client_support.join_open_transactions`,
    registered when Django starts): inside an atomic() block on `TENURE["DATABASE"]`, that block's
    transaction, on Django's connection and in a savepoint of its own, as `enqueue` does; outside
    any, nothing, so the client commits the job at once as the ORM would its writes. A client
    whose database is not Django's is refused inside atomic() rather than commit on its own."""
    alias = tenure_settings().database
    if not connections[alias].in_atomic_block:
        yield None
        return
    try:
        django_dsn = dsn_from_database(alias, connections[alias].settings_dict)
    except ConfigurationError:
        raise ConfigurationError(
            CANNOT_JOIN.format(
                alias=alias,
                why="that database is not PostgreSQL, where Tenure's jobs live",
                fix="Set TENURE['DATABASE'] to a PostgreSQL entry of DATABASES",
            )
        ) from None
    if client.dsn is None or _server_and_database(client.dsn) != _server_and_database(django_dsn):
        tenure_db = "the embedded server" if client.dsn is None else describe_dsn(client.dsn)
        raise ConfigurationError(
            CANNOT_JOIN.format(
                alias=alias,
                why=f"Tenure's client uses {tenure_db}, not Django's {describe_dsn(django_dsn)}",
                fix="Point TENURE['DSN'] (or the client's DSN) at Django's database, or leave it out "
                "to use DATABASES[TENURE['DATABASE']]",
            )
        )
    with transaction.atomic(using=alias):
        yield django_connection(alias)


@dataclass(frozen=True)
class JoinedCall(Generic[P]):
    """A task bound to a Django database and enqueue options; `enqueue` takes the handler's
    arguments, checked by mypy and again before anything is written."""

    task: Task[P, Any]
    using: str | None = None
    options: EnqueueOptions = field(default_factory=lambda: EnqueueOptions())

    def __post_init__(self) -> None:
        self.task.with_options(**self.options)  # unknown options fail here, at the call site

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Enqueues one job in Django's current transaction on `using`: inside `atomic()` it
        commits or rolls back with that block; outside any, it is committed at once."""
        alias = self.using or tenure_settings().database
        # A block of its own: inside the caller's atomic() it is a savepoint, so the insert is
        # in the caller's transaction even when it is the block's first statement, and a failed
        # insert leaves the caller's transaction usable; outside any, it commits the job.
        with transaction.atomic(using=alias):
            conn = django_connection(alias)
            return self.task.with_options(conn=conn, **self.options).enqueue_sync(*args, **kwargs)


def with_options(
    task: Task[P, Any], *, using: str | None = None, **options: Unpack[EnqueueOptions]
) -> JoinedCall[P]:
    """`task` with a Django database alias and enqueue options (`delay`, `priority`, `queue`,
    `max_attempts`, `ordering_key`, `unique`, `idempotency_key`):
    `with_options(send_receipt, delay=60).enqueue(order_id=order.pk)`."""
    return JoinedCall(task, using, options)


def enqueue(task: Task[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
    """Enqueues a job of `task` in Django's current transaction: `enqueue(send_receipt,
    order_id=order.pk)` inside `atomic()` commits or rolls back with the view's own writes."""
    return JoinedCall(task).enqueue(*args, **kwargs)
