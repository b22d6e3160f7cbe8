"""Writes the blocking twin of each async module in TWINS, so that the API is written once.

    python tools/async_to_sync.py           # rewrite every twin
    python tools/async_to_sync.py --check   # exit 1 when a twin differs from what its source gives

A twin is its source with `async` and `await` taken out and the names of TWIN_NAMES (and the
modules of TWINS) changed to their blocking ones. Where the two must differ, the source says so:

    if ASYNC:
        ...             # the async module only
    else:
        ...             # the twin only (optional)

    if not ASYNC:
        ...             # the twin only

`ASYNC = True` in the source (mypy's `always_true`) keeps the twin's branch out of the async
module's type check; the twin is checked on its own. The twin is then sorted, stripped of
imports it no longer uses, and formatted by ruff, as every module is.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Source module -> its generated twin (paths under src/).
TWINS = {
    "tenure/db/fetch.py": "tenure/db/sync/fetch.py",
    "tenure/db/pool.py": "tenure/db/sync/pool.py",
    "tenure/db/control_queries.py": "tenure/db/sync/control_queries.py",
    "tenure/db/producer_queries.py": "tenure/db/sync/producer_queries.py",
    "tenure/db/handler_queries.py": "tenure/db/sync/handler_queries.py",
    "tenure/db/gauge_queries.py": "tenure/db/sync/gauge_queries.py",
    "tenure/db/replication_queries.py": "tenure/db/sync/replication_queries.py",
    "tenure/db/workflow_queries.py": "tenure/db/sync/workflow_queries.py",
    "tenure/db/wait_queries.py": "tenure/db/sync/wait_queries.py",
    "tenure/db/published_queries.py": "tenure/db/sync/published_queries.py",
    "tenure/producer/result_wait.py": "tenure/producer/sync/result_wait.py",
    "tenure/producer/client.py": "tenure/producer/sync_client.py",
    "tenure/handler/transaction.py": "tenure/handler/sync_transaction.py",
    "tenure/handler/atomic.py": "tenure/handler/sync/atomic.py",
    "tenure/testing/inline.py": "tenure/testing/sync/inline.py",
}

#: Names whose blocking counterpart has another name.
TWIN_NAMES = {
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncCursor": "Cursor",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "AsyncGenerator": "Generator",
    "AsyncExitStack": "ExitStack",
    "asynccontextmanager": "contextmanager",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "enter_async_context": "enter_context",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "Client": "SyncClient",
    "AsyncTransaction": "SyncTransaction",
    "run_transaction": "run_transaction_sync",
    "run_atomic": "run_atomic_sync",
    "Inline": "SyncInline",
    # Blocking counterparts written by hand: a probe that needs asyncio's timeout runs on an
    # event loop of its own thread.
    "check_before_pool": "check_before_pool_sync",
    "behind_pooler": "behind_pooler_sync",
}

#: Attributes of modules whose blocking counterpart lives in another module.
TWIN_ATTRIBUTES = {("asyncio", "sleep"): ("time", "sleep")}

HEADER = (
    "# Generated from src/{source} by tools/async_to_sync.py: do not edit.\n"
    "# Change the source and run `python tools/async_to_sync.py`; CI fails when this file differs\n"
    "# from what the source gives.\n"
)

_IF_ASYNC = re.compile(r"^(?P<indent>[ ]*)if (?P<negated>not )?ASYNC:[ ]*(#.*)?$")
_ELSE = "else:"
_ASYNC_FLAG = re.compile(r"^ASYNC = True\b.*$")
#: A comment the async source carries for its twin's sake (an import only the twin uses).
_FOR_THE_TWIN = re.compile(r"[ ]+# noqa: [A-Z0-9, ]+ - the blocking twin\b.*$", re.MULTILINE)
_FROM_IMPORT = re.compile(r"^(?P<head>[ ]*from[ ]+)(?P<module>[\w.]+)(?P<tail>[ ]+import\b)")


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


MODULES = {_module(source): _module(twin) for source, twin in TWINS.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the block whose body begins at `start` and is indented past `indent`."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1  # trailing blank lines belong to what follows
    return end


def resolve_branches(text: str) -> str:
    """Keeps the twin's side of every `if ASYNC:` / `if not ASYNC:`, one level less indented."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _ASYNC_FLAG.match(line):
            i += 1
            continue
        match = _IF_ASYNC.match(line)
        if not match:
            out.append(line)
            i += 1
            continue
        indent = len(match["indent"])
        body_end = _block_end(lines, i + 1, indent)
        kept: list[str] = []
        if match["negated"]:
            kept = lines[i + 1 : body_end]
            i = body_end
        else:
            i = body_end
            if i < len(lines) and lines[i].strip().startswith(_ELSE) and _indent(lines[i]) == indent:
                else_end = _block_end(lines, i + 1, indent)
                kept = lines[i + 1 : else_end]
                i = else_end
        out.extend(k[4:] if k.strip() else k for k in kept)
    return "\n".join(out)


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def unasync(text: str) -> str:
    """`text` without async and await, with TWIN_NAMES and the twins' modules renamed."""
    text = "\n".join(_rename_modules(line) for line in text.split("\n"))
    starts = _offsets(text)
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)]
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    edits: list[tuple[int, int, str]] = []
    for at, token in enumerate(significant):
        following = significant[at + 1] if at + 1 < len(significant) else None
        begin = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1]
        if token.type != tokenize.NAME:
            continue
        dropped = token.string == "await" or (
            token.string == "async" and following is not None and following.string in ("def", "with", "for")
        )
        if dropped and following is not None:
            edits.append((begin, starts[following.start[0] - 1] + following.start[1], ""))
        elif token.string == "Awaitable" and following is not None and following.string == "[":
            # Awaitable[X] is X once blocking: drop the wrapper and its closing bracket.
            close = _closing_bracket(significant, at + 1)
            edits.append((begin, starts[following.end[0] - 1] + following.end[1], ""))
            edits.append(
                (starts[close.start[0] - 1] + close.start[1], starts[close.end[0] - 1] + close.end[1], "")
            )
        elif token.string in TWIN_NAMES:
            edits.append((begin, end, TWIN_NAMES[token.string]))
        elif (token.string, _attribute_after(significant, at)) in TWIN_ATTRIBUTES:
            module, _ = TWIN_ATTRIBUTES[token.string, _attribute_after(significant, at)]
            edits.append((begin, end, module))
    for begin, end, replacement in sorted(edits, reverse=True):
        text = text[:begin] + replacement + text[end:]
    return text


def _closing_bracket(tokens: list[tokenize.TokenInfo], opening: int) -> tokenize.TokenInfo:
    depth = 0
    for token in tokens[opening:]:
        depth += {"[": 1, "]": -1}.get(token.string, 0)
        if depth == 0:
            return token
    raise SystemExit("unbalanced [ in an async source")


def _attribute_after(tokens: list[tokenize.TokenInfo], at: int) -> str | None:
    """The attribute the token at `at` is followed by (`name.attribute`), if any."""
    if at + 2 < len(tokens) and tokens[at + 1].string == "." and tokens[at + 2].type == tokenize.NAME:
        return tokens[at + 2].string
    return None


def _rename_modules(line: str) -> str:
    match = _FROM_IMPORT.match(line)
    if match and match["module"] in MODULES:
        return f"{match['head']}{MODULES[match['module']]}{match['tail']}{line[match.end() :]}"
    return line


def _ruff(args: list[str], text: str, filename: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", filename, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise SystemExit(f"ruff {' '.join(args)} failed on {filename}: {done.stderr.strip()}")
    return done.stdout


def twin_of(source: str, twin: str) -> str:
    text = (ROOT / "src" / source).read_text(encoding="utf-8")
    text = HEADER.format(source=source) + unasync(_FOR_THE_TWIN.sub("", resolve_branches(text)))
    filename = str(ROOT / "src" / twin)
    text = _ruff(["check", "--fix", "--quiet", "--exit-zero"], text, filename)
    return _ruff(["format", "--quiet"], text, filename)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a twin is stale")
    args = parser.parse_args()
    stale = []
    for source, twin in TWINS.items():
        path = ROOT / "src" / twin
        wanted = twin_of(source, twin)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == wanted:
            continue
        if args.check:
            stale.append(f"src/{twin} is not what src/{source} gives")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        init = path.parent / "__init__.py"
        if not init.exists():
            init.write_text('"""Blocking twins generated from async sources (tools/async_to_sync.py)."""\n')
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote src/{twin}")
    if stale:
        stale.append("run `python tools/async_to_sync.py` and commit the result")
        print("\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
