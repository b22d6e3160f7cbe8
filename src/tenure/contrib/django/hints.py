"""Hints worded for a Django project: its users migrate and operate Tenure through manage.py,
whose database comes from settings.TENURE, and the `tenure` command's --dsn would send them to
another database (with no $TENURE_DSN, the embedded server)."""

from __future__ import annotations

from tenure.contrib.django.configured import tenure_app


def django_migrate_hint(schema: str) -> str:
    """`manage.py tenure_migrate` for the schema settings.TENURE names; `manage.py tenure
    migrate --schema ...` for another one."""
    if schema == tenure_app().schema:
        return "run `python manage.py tenure_migrate` (on the database and schema settings.TENURE names)"
    return f"run `python manage.py tenure migrate --schema {schema}` (on the database settings.TENURE names)"
