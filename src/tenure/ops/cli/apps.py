"""Finding the Tenure app a command works for: `MODULE[:APP]`, as `tenure worker` takes it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tenure.app import Tenure
from tenure.model.errors import TenureError
from tenure.ops.cli._common import resolve


def load_app(target: str) -> Tenure:
    """`module` (with one Tenure instance in it) or `module:attribute`, imported from the working
    directory first, as `python -m` would."""
    module_name, _, attr = target.partition(":")
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise TenureError(
            f"{target!r} is not a module path: give MODULE or MODULE:APP, as in shop.tasks or shop.tasks:app"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TenureError(f"cannot import {module_name!r} ({exc}); give an importable module path") from None
    if attr:
        app = getattr(module, attr, None)
    else:
        apps = [v for v in vars(module).values() if isinstance(v, Tenure)]
        app = apps[0] if len(apps) == 1 else None
        if len(apps) > 1:
            raise TenureError(f"{module_name} defines several Tenure apps; name one as {module_name}:NAME")
    if not isinstance(app, Tenure):
        raise TenureError(f"no Tenure app found in {target!r}; define `app = tenure.Tenure()` there")
    return app


def module_of_task(task: str) -> str:
    """The module a task's name says defines it: everything before the last dot, as in the
    default names `module.function` (`shop.tasks.send_receipt` -> `shop.tasks`)."""
    module, _, _ = task.rpartition(".")
    if not module:
        raise TenureError(
            f"cannot tell which app defines task {task!r}: its name has no module part. "
            "Give the app with --app MODULE[:APP] (as for `tenure worker`), or enqueue it by name "
            "with --by-name --queue QUEUE"
        )
    return module


def connect_app(app: Tenure, args: argparse.Namespace) -> str:
    """Points `app` at the command's database (--dsn, else the app's own, else $TENURE_DSN or the
    embedded server) and schema (--schema when given); returns the DSN."""
    dsn = resolve(argparse.Namespace(dsn=args.dsn or app.dsn, json=getattr(args, "json", False))).dsn
    app.dsn = dsn
    if args.schema_given:
        app.schema = args.schema
    return dsn
