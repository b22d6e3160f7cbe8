"""The `TENURE` setting of a Django project, read once and checked.

TENURE = {
    "APP": "shop.tasks:app",   # required: the module (or module:attribute) of the Tenure app
    "DSN": None,               # default: built from DATABASES[DATABASE]
    "SCHEMA": None,            # default: the app's own schema ("tenure")
    "DATABASE": "default",     # the Django database whose transactions enqueues join
    "MIGRATE": True,           # run Tenure's migrations after every `manage.py migrate`
}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from psycopg import conninfo

from tenure.model.errors import ConfigurationError

KNOWN_KEYS = ("APP", "DSN", "SCHEMA", "DATABASE", "MIGRATE")

# Django's own OPTIONS of its PostgreSQL backend, which are not libpq connection parameters.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "assume_role", "server_side_binding", "pool", "cursor_factory", "context"}
)
_SETTINGS_TO_LIBPQ = {
    "NAME": "dbname",
    "USER": "user",
    "PASSWORD": "password",
    "HOST": "host",
    "PORT": "port",
}


@dataclass(frozen=True)
class TenureSettings:
    app: str
    dsn: str | None
    schema: str | None
    database: str
    migrate: bool


def tenure_settings() -> TenureSettings:
    """The project's `TENURE` setting, with its defaults; a clear error for a missing or wrong key."""
    raw: Any = getattr(settings, "TENURE", None)
    if not isinstance(raw, dict) or not raw.get("APP"):
        raise ConfigurationError(
            'settings.TENURE must be a dict naming your Tenure app, as in TENURE = {"APP": "shop.tasks:app"}'
        )
    unknown = sorted(set(raw) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigurationError(
            f"settings.TENURE has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"the keys are {', '.join(KNOWN_KEYS)}"
        )
    database = raw.get("DATABASE", "default")
    if database not in settings.DATABASES:
        raise ConfigurationError(
            f"settings.TENURE['DATABASE'] is {database!r}, which is not in settings.DATABASES; "
            f"name one of {', '.join(map(repr, settings.DATABASES))}"
        )
    return TenureSettings(
        app=str(raw["APP"]),
        dsn=raw.get("DSN") or None,
        schema=raw.get("SCHEMA") or None,
        database=database,
        migrate=bool(raw.get("MIGRATE", True)),
    )


def dsn_from_database(alias: str, database: dict[str, Any]) -> str:
    """A libpq DSN for one entry of `settings.DATABASES` (its NAME, USER, PASSWORD, HOST, PORT
    and its libpq OPTIONS such as sslmode), so that Tenure's own connections (workers, migrations,
    enqueues outside a request) reach the database the ORM uses."""
    engine = str(database.get("ENGINE", ""))
    if "postgresql" not in engine and "postgis" not in engine:
        raise ConfigurationError(
            f"DATABASES[{alias!r}] uses {engine or 'no ENGINE'}, not PostgreSQL: Tenure keeps its jobs "
            'in PostgreSQL. Set TENURE["DSN"] to a PostgreSQL database, or TENURE["DATABASE"] to a '
            "PostgreSQL entry of DATABASES"
        )
    params: dict[str, Any] = {
        key: database[name]
        for name, key in _SETTINGS_TO_LIBPQ.items()
        if database.get(name) not in (None, "")
    }
    for key, value in dict(database.get("OPTIONS") or {}).items():
        if key not in _DJANGO_ONLY_OPTIONS and isinstance(value, str | int):
            params[key] = value
    try:
        return conninfo.make_conninfo(**params)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"cannot build a DSN from DATABASES[{alias!r}] ({str(exc).splitlines()[0]}); "
            'set TENURE["DSN"] instead'
        ) from None
