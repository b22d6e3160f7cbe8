"""tenure.contrib.django's pieces that need no Django project: the DSN it derives from
DATABASES and the driver connections it accepts or refuses."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from psycopg import conninfo

pytest.importorskip("django")

from tenure.contrib.django.joined import psycopg_connection_of
from tenure.contrib.django.settings import dsn_from_database
from tenure.model.errors import ConfigurationError


def test_dsn_from_database_keeps_libpq_options() -> None:
    """A DATABASES entry becomes a libpq DSN with its libpq OPTIONS and without Django's own."""
    dsn = dsn_from_database(
        "default",
        {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "shop",
            "USER": "web",
            "PASSWORD": "s3cret",
            "HOST": "db.internal",
            "PORT": 6432,
            "OPTIONS": {"sslmode": "require", "server_side_binding": True, "isolation_level": 1},
        },
    )
    assert conninfo.conninfo_to_dict(dsn) == {
        "dbname": "shop",
        "user": "web",
        "password": "s3cret",
        "host": "db.internal",
        "port": "6432",
        "sslmode": "require",
    }


def test_dsn_from_database_refuses_other_engines() -> None:
    """A non-PostgreSQL DATABASES entry is refused with the settings that fix it named."""
    with pytest.raises(ConfigurationError, match=r"not PostgreSQL.*TENURE\[\"DSN\"\]"):
        dsn_from_database("default", {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"})


def test_psycopg3_connection_is_accepted(dsn: str) -> None:
    """Django's driver connection is used as it is when it is psycopg 3's."""
    with psycopg.connect(dsn) as conn:
        assert psycopg_connection_of(conn, "default") is conn


def test_psycopg2_connection_is_refused(dsn: str) -> None:
    """A psycopg2 connection is refused, saying to install psycopg 3 or fall back to on_commit."""
    psycopg2 = pytest.importorskip("psycopg2")
    conn = psycopg2.connect(dsn)
    try:
        with pytest.raises(ConfigurationError, match=r"psycopg2.*psycopg 3.*on_commit"):
            psycopg_connection_of(conn, "default")
    finally:
        conn.close()


def test_other_driver_is_refused() -> None:
    """A connection of another driver (here sqlite3) is refused with the driver named."""
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ConfigurationError, match=r"through sqlite3"):
            psycopg_connection_of(conn, "legacy")
    finally:
        conn.close()
