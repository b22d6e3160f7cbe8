"""What is wrong with a DSN that libpq cannot use, said without its password.

libpq's own messages quote the fragment it stumbled on, which may be a piece of the password
(`password=se cret` is "missing "=" after "cret""), or the whole URI with its password. So a
malformed DSN is explained here instead: which part is wrong (its scheme, a quote left open, a
setting with no `=`, a port that is not a number), and a fragment of it only where that fragment
cannot be part of the password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import psycopg
from psycopg import conninfo

#: What a libpq URI starts with: nothing else is read as a URI (not even `PostgreSQL://`).
URI_PREFIXES = ("postgresql://", "postgres://")
#: Something that reads as a URI's scheme, `mysql://` or `postgresql+psycopg://`.
_SCHEME = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.:-]*)://")
_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUOTED = re.compile(r'"([^"]*)"')
_OPEN_QUOTE = re.compile(r'"([^"]*)$')
_ENCODE_HINT = "in a URI, percent-encode what the user name or password holds of @ : / ? # % (@ is %40)"
_QUERY_HINT = "a URI's parameters follow '?' as key=value pairs joined by &, as in ?sslmode=require"
EXAMPLE = "postgresql://user@host:5432/dbname"


def dsn_problem(dsn: str) -> str | None:
    """Why libpq cannot use `dsn`, naming the part that is wrong and never the password; None
    when it parses and its ports are numbers."""
    if not dsn.strip():
        return "the DSN is empty"
    scheme = _SCHEME.match(dsn)
    if scheme and not dsn.lstrip().startswith(URI_PREFIXES):
        return _wrong_scheme(scheme.group(1))
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except (psycopg.ProgrammingError, UnicodeError) as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if dsn.lstrip().startswith(URI_PREFIXES):
            hint = _QUERY_HINT if "query parameter" in said else _ENCODE_HINT
            return f"the DSN could not be parsed ({_redacted(said, dsn)}): {hint}"
        return _key_value_problem(dsn, said)
    return _value_problem(dsn, parts, uri=dsn.lstrip().startswith(URI_PREFIXES))


def _wrong_scheme(scheme: str) -> str:
    said = f"the DSN's scheme is {scheme}://; Tenure needs postgresql:// or postgres://"
    base, plus, _ = scheme.partition("+")
    if plus and base.lower() in ("postgresql", "postgres"):
        return f"{said} (without the driver after '+', as SQLAlchemy URLs give it)"
    if scheme.lower() in ("postgresql", "postgres"):
        return f"{said}, in lower case"
    if scheme.lower().endswith(("postgresql", "postgres")):
        return f"{said} (drop the {scheme[: scheme.lower().rfind('postgres')]} in front)"
    return said


def _value_problem(dsn: str, parts: Mapping[str, object], *, uri: bool) -> str | None:
    """A DSN that parses but that no connection can use, found before the connection attempt
    would quote its pieces back (which may then be pieces of the password)."""
    port = str(parts.get("port") or "")
    if any(p and not p.isdigit() for p in port.split(",")):
        # In `postgresql://u:pa/ss@h/db` libpq reads `pa`, a piece of the password, as the port.
        safe = "@" not in str(parts.get("dbname") or "") and not any(
            port in s or s in port for s in _secrets(dsn)
        )
        return f"the DSN's port{f' {port!r}' if safe else ''} is not a number" + (
            f": give one like {EXAMPLE}; {_ENCODE_HINT}" if uri else ": give one like port=5432"
        )
    if uri and "@" in str(parts.get("host") or ""):
        return f"the DSN's host contains '@', which usually ends a password early: {_ENCODE_HINT}"
    return None


def _key_value_problem(dsn: str, said: str) -> str:
    """The problem of a `key=value ...` DSN libpq refused, found by reading it as libpq does."""
    if not re.search(r"\S\s*=", dsn):
        return (
            "the DSN is neither a URI nor key=value settings: give one like "
            f"{EXAMPLE} or host=... dbname=... user=..."
        )
    pos, previous = 0, None
    while True:
        pos = _skip_space(dsn, pos)
        if pos >= len(dsn):
            break
        start = pos
        while pos < len(dsn) and dsn[pos] != "=" and not dsn[pos].isspace():
            pos += 1
        key = dsn[start:pos]
        pos = _skip_space(dsn, pos)
        after_password = previous is not None and previous[0] == "password" and not previous[1]
        if pos >= len(dsn) or dsn[pos] != "=":
            if after_password:
                return (
                    "the DSN could not be parsed after its password: a value with spaces needs "
                    "single quotes, as in password='two words' (inside them write \\' and \\\\)"
                )
            shown = f' near "{key}"' if _WORD.match(key) else ""
            return (
                f"the DSN could not be parsed{shown}: settings are key=value pairs separated by "
                "spaces; check quoting (a value with spaces goes in single quotes: key='a b')"
            )
        pos = _skip_space(dsn, pos + 1)
        quoted = pos < len(dsn) and dsn[pos] == "'"
        pos, closed = _value_end(dsn, pos, quoted)
        if not closed:
            named = f"{key} value" if _WORD.match(key) else "a value"
            return (
                f"the DSN's {named} opens a quote that never closes: end it with ', and write \\' "
                "for a quote inside it"
            )
        if after_password and "invalid connection option" in said:
            return (
                "the DSN could not be parsed after its password: a value with spaces needs single "
                "quotes, as in password='two words' (inside them write \\' and \\\\)"
            )
        previous = (key, quoted)
    found = _QUOTED.search(said)
    if "invalid connection option" in said and found and _WORD.match(found.group(1)):
        return (
            f'the DSN names an unknown setting "{found.group(1)}": libpq\'s are host, port, dbname, '
            "user, password, sslmode, ... (see its connection parameters)"
        )
    return f"the DSN could not be parsed ({_redacted(said, dsn)}); check quoting"


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _value_end(text: str, pos: int, quoted: bool) -> tuple[int, bool]:
    """Where a value starting at `pos` ends (libpq's rules: backslash escapes, a quoted value
    runs to its closing quote), and whether its quote, if any, closes."""
    if quoted:
        pos += 1
        while pos < len(text):
            if text[pos] == "\\":
                pos += 2
            elif text[pos] == "'":
                return pos + 1, True
            else:
                pos += 1
        return pos, False
    while pos < len(text) and not text[pos].isspace():
        pos += 2 if text[pos] == "\\" else 1
    return pos, True


def _secret_spans(dsn: str) -> list[tuple[int, int]]:
    """Where in `dsn` a password may be: a URI's text between the user's ':' and the last '@'
    before the host, and every `password=` value (to the end of the DSN, when a quote is open)."""
    spans: list[tuple[int, int]] = []
    for prefix in URI_PREFIXES:
        begin = len(dsn) - len(dsn.lstrip()) + len(prefix)
        if dsn.lstrip().startswith(prefix):
            authority = re.split(r"[/?]", dsn[begin:], maxsplit=1)[0]
            userinfo = authority.rpartition("@")[0]
            if ":" in userinfo:
                spans.append((begin + userinfo.index(":") + 1, begin + len(userinfo)))
    for match in re.finditer(r"password\s*=\s*", dsn):
        tail = dsn[match.end() :]
        if tail.startswith("'"):
            end, closed = _value_end(tail, 0, True)
            length = end if closed else len(tail)
        else:
            length = len(re.split(r"[\s&]", tail, maxsplit=1)[0])
        spans.append((match.end(), match.end() + length))
    return [(start, end) for start, end in spans if end > start]


def _secrets(dsn: str) -> list[str]:
    return [dsn[start:end] for start, end in _secret_spans(dsn)]


def _masked(dsn: str) -> str:
    """`dsn` with each place a password may be written as ***."""
    for start, end in sorted(_secret_spans(dsn), reverse=True):
        dsn = dsn[:start] + "***" + dsn[end:]
    return dsn


def _redacted(said: str, dsn: str) -> str:
    """libpq's message with every quoted fragment that may hold the password replaced by '…', and
    the whole DSN, when quoted, shown with its password as ***."""
    secrets = _secrets(dsn)

    def shown(match: re.Match[str]) -> str:
        fragment = match.group(1)
        if fragment == dsn:
            return f'"{_masked(dsn)}"'
        if len(fragment) > 1 and any(fragment in s or s in fragment for s in secrets):
            return '"…" (part of the password)'
        return match.group(0)

    said = _QUOTED.sub(shown, said.removesuffix(" in connection info string"))
    # A quote left open: the DSN held a line break inside it, and only the message's first line
    # is kept. Whatever of the password is still there is masked where it stands.
    said = _OPEN_QUOTE.sub(lambda m: f'"{_masked(m.group(1))}', said)
    for secret in secrets:
        if len(secret) > 1:
            said = said.replace(secret, "***")
    return said or "unparseable"
