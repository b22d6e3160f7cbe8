"""Tenure's schema, migrated by `manage.py migrate` and `manage.py tenure_migrate`.

Tenure versions its own schema (with migrations that must run outside a transaction and a
migration lock held across them), so it is not a Django migration: a Django migration would run
once and then be recorded as done, and miss the migrations of a later Tenure release. Instead
Tenure's own idempotent `migrate` runs after every `manage.py migrate` (the `post_migrate`
signal), which also gives the test database Django's test runner creates its jobs tables.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, TextIO

from tenure.contrib.django.configured import follow_database, tenure_app, tenure_dsn
from tenure.contrib.django.settings import tenure_settings
from tenure.db.connect import connect
from tenure.db.migrate import MigrationReport, migrate


def migrate_tenure(using: str | None = None) -> MigrationReport:
    """Applies Tenure's pending migrations to the database Tenure uses for Django's `using`."""
    dsn = tenure_dsn(using)
    schema = tenure_app().schema

    async def apply() -> MigrationReport:
        async with await connect(dsn) as conn:
            return await migrate(conn, schema)

    return asyncio.run(apply())


def describe(report: MigrationReport) -> str:
    applied = ", ".join(map(str, report.applied)) if report.applied else "none pending"
    return f"Tenure schema {report.schema!r}: applied {applied}; at version {report.current}"


def after_django_migrate(using: str, verbosity: int = 1, stdout: TextIO | None = None, **_: Any) -> None:
    """`post_migrate` receiver: migrates Tenure's schema along with the database Django just
    migrated, when that is the database Tenure's jobs join (`TENURE["DATABASE"]`)."""
    if using != tenure_settings().database:
        return
    follow_database(using)
    report = migrate_tenure(using)
    if verbosity >= 1:
        (stdout or sys.stdout).write(describe(report) + "\n")
