"""`manage.py tenure_migrate`: apply Tenure's pending migrations (what `migrate` also does)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenure.contrib.django.migrations_hook import describe, migrate_tenure
from tenure.model.errors import TenureError


class Command(BaseCommand):
    help = "Create or upgrade Tenure's schema (idempotent; manage.py migrate runs it too)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database", default=None, help="the Django database alias (default: TENURE['DATABASE'])"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = migrate_tenure(options["database"])
        except TenureError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(describe(report))
