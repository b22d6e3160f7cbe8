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
MIDDLEWARE: list[str] = []

INSTALLED_APPS = [
    "shop",
    "tenure.contrib.django",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # uses psycopg 3 when it is installed
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

TENURE = {
    "APP": "shop.tasks:app",  # required: MODULE or MODULE:ATTRIBUTE of your tenure.Tenure()
    # "DSN": "postgresql://...",  # default: built from DATABASES[DATABASE]
    # "SCHEMA": "tenure",         # default: the app's own schema
    # "DATABASE": "default",      # the Django database whose transactions enqueues join
    # "MIGRATE": True,            # migrate Tenure's schema after every `manage.py migrate`
}

# With DEBUG off, Django reports a view's error only by e-mail to ADMINS: print it instead.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
