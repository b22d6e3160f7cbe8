"""Griffe extension: an attribute's `#:` comment lines become its docstring.

Tenure documents attributes and constants with `#:` comments above them (the convention Sphinx
reads); griffe reads only a string after the assignment, so without this the reference would
leave those attributes out.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

import griffe


@functools.lru_cache(maxsize=16)
def _lines(code: str) -> list[str]:
    return code.splitlines()


class CommentDocstrings(griffe.Extension):
    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        # Only what griffe reads from source: an inspected attribute has no comment to read.
        if attr.docstring is not None or attr.lineno is None or not isinstance(node, ast.AST):
            return
        lines = _lines(agent.code)
        comment: list[str] = []
        above = attr.lineno - 1  # line numbers count from 1
        while above >= 1 and lines[above - 1].strip().startswith("#:"):
            comment.insert(0, lines[above - 1].strip().removeprefix("#:").strip())
            above -= 1
        if comment:
            attr.docstring = griffe.Docstring(
                "\n".join(comment), lineno=above + 1, endlineno=attr.lineno - 1, parent=attr
            )
