"""The CLI reference (docs/cli.md), generated from the argument parser itself, so it cannot say
what the commands do not do: `python -m tenure.ops.cli.reference > docs/cli.md` writes it, and
tests/unit/test_cli_reference.py fails when the file and the parser disagree."""

from __future__ import annotations

import argparse
import os

from tenure.ops.cli import build_parser

#: Help is wrapped at this width whatever the terminal, so the file is the same everywhere.
WIDTH = "100"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _section(path: str, parser: argparse.ArgumentParser, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{path}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, child in _subcommands(parser).items():
        lines += _section(f"{path} {name}", child, min(depth + 1, 4))
    return lines


def render() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse reads it for its line width
    try:
        parser = build_parser()
        lines = [
            "# Command reference",
            "",
            "Every `tenure` command with its options, as `--help` prints them. Generated from the",
            "parser (`python -m tenure.ops.cli.reference > docs/cli.md`); a test keeps it in step.",
            "",
        ]
        for name, child in _subcommands(parser).items():
            lines += _section(f"tenure {name}", child, 2)
        return "\n".join(lines).rstrip() + "\n"
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


if __name__ == "__main__":
    print(render(), end="")
