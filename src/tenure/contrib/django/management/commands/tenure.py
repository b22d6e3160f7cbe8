"""`manage.py tenure ...`: the `tenure` operator commands (status, enqueue, show, dead, cancel,
retry, queues, ...) on the database and schema settings.TENURE names, with Django set up, so an
app whose tasks use the ORM can be loaded."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from tenure.contrib.django.configured import tenure_app, tenure_dsn
from tenure.contrib.django.settings import tenure_settings
from tenure.model.errors import TenureError
from tenure.ops.cli import build_parser
from tenure.ops.cli import main as tenure_main

#: Commands that build databases and data of their own: run here, they would write into the
#: project's database.
NOT_FOR_A_PROJECT = ("demo", "soak", "bench", "embedded")
#: Options Django's manage.py reads before any command, which Tenure's parser does not know.
DJANGO_OPTIONS = ("--settings", "--pythonpath")


def without_django_options(argv: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


def given(argv: list[str], option: str) -> bool:
    return any(arg == option or arg.startswith(f"{option}=") for arg in argv)


def first_word(argv: list[str]) -> str | None:
    """The command `argv` names: its first word that is neither an option nor an option's value."""
    takes_value = False
    for arg in argv:
        if takes_value:
            takes_value = False
        elif arg == "--log-level":
            takes_value = True
        elif not arg.startswith("-"):
            return arg
    return None


def tenure_argv(argv: list[str]) -> list[str]:
    """`argv` with the project's database and schema (and, for `enqueue`, its app) added, unless
    given: Tenure's common options belong to each command, so they go after it."""
    command = first_word(argv)
    if command in NOT_FOR_A_PROJECT:
        raise CommandError(
            f"`tenure {command}` works on a database of its own, not your project's: run it as "
            f"`tenure {command}` outside manage.py"
        )
    if command is None:
        return argv  # Tenure's parser says what is missing, or prints the help asked for
    extra: list[str] = []
    if not given(argv, "--dsn"):
        extra += ["--dsn", tenure_dsn()]
    if not given(argv, "--schema"):
        extra += ["--schema", tenure_app().schema]
    if command == "enqueue" and not given(argv, "--app") and not given(argv, "--by-name"):
        extra += ["--app", tenure_settings().app]
    if command == "worker" and not names_a_positional("worker", argv[argv.index(command) + 1 :]):
        # `tenure worker MODULE`: the project's app, as manage.py tenure_worker runs it.
        at = argv.index(command) + 1
        argv = [*argv[:at], tenure_settings().app, *argv[at:]]
    return argv + extra


def names_a_positional(command: str, args: list[str]) -> bool:
    """Whether `args` (what follows `command`) give the command a positional argument, as
    Tenure's own parser reads them: an option's value is not one."""
    options = command_parser(command)._option_string_actions
    takes_value = False
    for arg in args:
        if takes_value:
            takes_value = False
        elif arg == "--":
            return True
        elif arg.startswith("-") and len(arg) > 1:
            action = options.get(arg.split("=", 1)[0])
            takes_value = "=" not in arg and action is not None and action.nargs != 0
        else:
            return True
    return False


def command_parser(command: str) -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    raise KeyError(command)


class Command(BaseCommand):
    help = (
        "Run a `tenure` command (status, enqueue, show, dead, cancel, retry, queues, ...) on the "
        "database and schema of settings.TENURE: manage.py tenure status, manage.py tenure dead list."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("argv", nargs="*", help="the tenure command and its options")

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after `tenure` is Tenure's: its -v, -q and --json are not Django's options.
        try:
            code = self._run(without_django_options(argv[2:]))
        except CommandError as exc:
            self.stderr.write(f"{type(exc).__name__}: {exc}")
            sys.exit(exc.returncode)
        finally:
            connections.close_all()
        if code:
            sys.exit(code)

    def handle(self, *args: Any, **options: Any) -> None:
        code = self._run(list(options["argv"]))
        if code:
            raise CommandError(f"tenure exited with {code}", returncode=code)

    def _run(self, argv: list[str]) -> int:
        try:
            full = tenure_argv(argv)
        except TenureError as exc:
            raise CommandError(str(exc)) from None
        try:
            return tenure_main(full)
        except SystemExit as exc:  # argparse: --help, or a usage error it has explained
            return exc.code if isinstance(exc.code, int) else 1
