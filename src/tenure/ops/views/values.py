"""How a value a job published reads for people, on the command line and on the dashboard alike."""

from __future__ import annotations

import json


def shown_value(value: object, longest: int) -> str:
    """`value` as JSON text, cut to `longest` characters (its last an ellipsis) when longer."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= longest else text[: longest - 1] + "…"
