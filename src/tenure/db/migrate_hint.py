"""How an error tells its reader to create or upgrade Tenure's schema.

By default with the `tenure` command and the same --dsn. An integration whose users reach
Tenure through their framework's own commands replaces it for its process (the Django contrib
names `manage.py tenure_migrate`, whose database comes from settings.TENURE): run as the default
says, the command would migrate another database."""

from __future__ import annotations

from collections.abc import Callable

MigrateHint = Callable[[str], str]


def tenure_cli_hint(schema: str) -> str:
    return f"run `tenure migrate --schema {schema}` (with the same --dsn)"


_hint: MigrateHint = tenure_cli_hint


def migrate_hint(schema: str) -> str:
    """What to run to create or upgrade `schema`, worded for this process's users."""
    return _hint(schema)


def set_migrate_hint(hint: MigrateHint | None) -> None:
    """Words the hint for every error of this process; None: the `tenure` command's again."""
    global _hint
    _hint = hint or tenure_cli_hint
