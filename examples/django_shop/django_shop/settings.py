"""Settings of the example shop. Its database is $SHOP_DSN (a libpq URL), by default a `shop`
database on the local server; Tenure's jobs live in the same database, in schema `tenure`."""

import os

from psycopg import conninfo

_db = conninfo.conninfo_to_dict(os.environ.get("SHOP_DSN", "postgresql://postgres@127.0.0.1:5432/shop"))

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "django_shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["shop", "tenure.contrib.django"]
MIDDLEWARE: list[str] = []

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when installed, as Tenure requires
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

# Tenure's DSN is derived from DATABASES["default"]; its schema is migrated by `manage.py migrate`.
TENURE = {"APP": "shop.tasks:app"}
