"""Text that PostgreSQL will store: error messages and codes come from anywhere (an exception's
message may quote binary data), and one unstorable character must not leave a job running."""

from __future__ import annotations

#: Shown in place of a NUL, which PostgreSQL text cannot hold.
NUL_STANDIN = "\\x00"


def storable_text(text: str, limit: int | None = None) -> str:
    """`text` without NUL characters or lone surrogates, cut to `limit` characters."""
    cleaned = text.replace("\x00", NUL_STANDIN)
    # A lone surrogate (from a surrogateescape-decoded byte) cannot be encoded to UTF-8.
    cleaned = cleaned.encode("utf-8", errors="replace").decode("utf-8")
    return cleaned if limit is None else cleaned[:limit]
