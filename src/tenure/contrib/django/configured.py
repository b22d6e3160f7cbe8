"""The project's Tenure app, as `settings.TENURE` configures it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from django.db import connections

from tenure.app import Tenure
from tenure.contrib.django.settings import dsn_from_database, tenure_settings
from tenure.ops.cli.apps import load_app


@dataclass
class _Configured:
    app: Tenure
    #: Whether the app's DSN is Django's database's, to be followed when that changes.
    follows_django: bool


@functools.cache
def _configured() -> _Configured:
    configured = tenure_settings()
    app = load_app(configured.app)
    if configured.schema is not None:
        app.schema = configured.schema
    follows = configured.dsn is None and app.dsn is None
    if configured.dsn is not None or follows:
        app.dsn = tenure_dsn()
    return _Configured(app, follows)


def tenure_app() -> Tenure:
    """The Tenure app named by `TENURE["APP"]`, imported once (which registers its tasks), with
    `TENURE["SCHEMA"]` applied and, when the app names no DSN itself, the DSN of `TENURE["DSN"]`
    or else of Django's database."""
    return _configured().app


def follow_database(using: str) -> None:
    """Points the app at Django's database `using` again when its DSN is derived from it: Django's
    test runner renames the database after start-up, and `post_migrate` (which calls this) is
    the first thing to run on the test database, before any client of the app is opened."""
    configured = _configured()
    if configured.follows_django and using == tenure_settings().database:
        configured.app.dsn = tenure_dsn(using)


def tenure_dsn(using: str | None = None) -> str:
    """Where Tenure's own connections go: `TENURE["DSN"]`, else the database `using` (default:
    `TENURE["DATABASE"]`) as Django reaches it now, so under Django's test runner the test
    database."""
    configured = tenure_settings()
    if configured.dsn is not None:
        return configured.dsn
    alias = using or configured.database
    return dsn_from_database(alias, connections[alias].settings_dict)
