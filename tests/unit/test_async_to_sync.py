"""The generator of blocking twins: what it takes out, what it renames, which branch it keeps,
and that every twin in the tree is what its source gives."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_to_sync", ROOT / "tools" / "async_to_sync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCE = """
ASYNC = True


class Client:
    async def __aenter__(self) -> Client:
        await self.pool()  # opened at once
        return self

    async def rows(self, conn: AsyncConnection[Any]) -> list[int]:
        async with conn.cursor() as cur:
            await cur.execute("SELECT 1")
            if ASYNC:
                await asyncio.sleep(0)
            else:
                print("only in the twin")
            if not ASYNC:
                print("also only in the twin")
            async for row in cur:
                pass
            return [r async for r in cur]
"""


def test_async_and_await_go_and_async_names_become_blocking_ones() -> None:
    """`async def/with/for` and `await` lose their keyword, comments stay, and AsyncConnection,
    __aenter__ and Client become Connection, __enter__ and SyncClient."""
    tool = _tool()
    twin = tool.unasync(tool.resolve_branches(SOURCE))
    assert "async def" not in twin and "await " not in twin and "async with" not in twin
    assert "def __enter__(self) -> SyncClient:" in twin
    assert "self.pool()  # opened at once" in twin
    assert "conn: Connection[Any]" in twin
    assert "for row in cur:" in twin
    assert "ASYNC = True" not in twin


def test_the_twin_keeps_its_own_branch_one_level_out() -> None:
    """`if ASYNC:` keeps only its `else:` body, `if not ASYNC:` its body, each dedented a level."""
    tool = _tool()
    twin = tool.resolve_branches(SOURCE)
    assert "asyncio.sleep" not in twin and "if ASYNC" not in twin and "else:" not in twin
    assert '\n            print("only in the twin")\n' in twin
    assert '\n            print("also only in the twin")\n' in twin


def test_every_twin_in_the_tree_is_what_its_source_gives() -> None:
    """`tools/async_to_sync.py --check` passes on the tree as committed (CI runs it too)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "async_to_sync.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
