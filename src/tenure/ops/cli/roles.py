"""`tenure roles`: the GRANTs of least-privilege producer, worker and admin roles for a schema."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_roles(args: argparse.Namespace) -> int:
    from tenure.security.roles import Role, all_grants

    names = {Role.PRODUCER: args.producer, Role.WORKER: args.worker, Role.ADMIN: args.admin}
    print(all_grants(args.schema, names), end="")
    return 0


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "roles",
        parents=[common],
        help="print the GRANTs for producer, worker and admin roles (see docs/security.md)",
    )
    p.add_argument("--producer", default="tenure_producer", help="role that may only enqueue")
    p.add_argument("--worker", default="tenure_worker", help="role that claims and finishes jobs")
    p.add_argument("--admin", default="tenure_admin", help="role for migrations and dead jobs")
    p.set_defaults(handler=cmd_roles)
