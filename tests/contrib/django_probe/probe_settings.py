"""The example shop's settings, with the probe's tasks and the connection settings a test asks for
($PROBE_CONN_MAX_AGE: seconds, or "none" for connections kept for ever; $PROBE_HEALTH_CHECKS)."""

import os

from django_shop.settings import *  # noqa: F403

_max_age = os.environ.get("PROBE_CONN_MAX_AGE", "0")
DATABASES["default"]["CONN_MAX_AGE"] = None if _max_age == "none" else int(_max_age)  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = os.environ.get("PROBE_HEALTH_CHECKS") == "1"  # noqa: F405
TENURE = {"APP": "probe_tasks:app"}
