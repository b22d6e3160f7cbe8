"""Tenure's pytest plugin, registered by the package (the `pytest11` entry point `tenure`), so a
project that installs Tenure has it with nothing to configure.

Its fixtures give each test the app on a schema of its own (tenure.testing.isolation):

- `tenure_app`: the app, switched to the test schema, emptied before the test;
- `tenure_inline`: `Inline` on it, for async tests (needs pytest-asyncio; strict or auto mode);
- `tenure_inline_sync`: `SyncInline` on it, for blocking tests (Django, Flask, plain pytest).

The app is the one the tests import (the only `Tenure` instance among the imported modules), or
the one named by the ini option `tenure_app` / the option `--tenure-app` (MODULE[:APP], as
`tenure worker` takes it).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tenure.app import Tenure
    from tenure.testing.inline import Inline
    from tenure.testing.isolation import TestSchema
    from tenure.testing.sync.inline import SyncInline

NAME_THE_APP = (
    'name it in your pytest settings, as `tenure worker` takes it: tenure_app = "shop.tasks" under '
    "[tool.pytest.ini_options] in pyproject.toml (or [pytest] in pytest.ini), or pass --tenure-app shop.tasks"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    help_text = (
        "the Tenure app the tenure_* fixtures isolate, MODULE[:APP] as for `tenure worker` "
        "(default: the one app the tests import)"
    )
    parser.addini("tenure_app", help_text, default=None)
    parser.getgroup("tenure").addoption("--tenure-app", dest="tenure_app", default=None, help=help_text)


def app_under_test(config: pytest.Config) -> Tenure:
    """The app named by --tenure-app or the tenure_app setting, else the one the tests import."""
    from tenure.app import Tenure
    from tenure.model.errors import TenureError
    from tenure.ops.cli.apps import load_app

    target = config.getoption("tenure_app") or config.getini("tenure_app")
    if target:
        try:
            return load_app(str(target))
        except TenureError as exc:
            pytest.fail(f"tenure_app = {target!r}: {exc}", pytrace=False)
    found: dict[int, tuple[str, Tenure]] = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name == "tenure" or name.startswith("tenure."):
            continue
        for attribute, value in list(getattr(module, "__dict__", {}).items()):
            if isinstance(value, Tenure):
                found.setdefault(id(value), (f"{name}:{attribute}", value))
    if len(found) == 1:
        [(_, app)] = found.values()
        return app
    if not found:
        pytest.fail(
            f"the tenure fixtures found no Tenure app in the modules the tests import; {NAME_THE_APP}",
            pytrace=False,
        )
    named = ", ".join(sorted(where for where, _ in found.values()))
    pytest.fail(f"the tenure fixtures found several Tenure apps ({named}); {NAME_THE_APP}", pytrace=False)


@pytest.fixture(scope="session")
def tenure_test_schema(request: pytest.FixtureRequest) -> Iterator[TestSchema]:
    """The session's test schema on the app's database: created and migrated once (per process
    under pytest-xdist), dropped at the end."""
    from tenure.testing.isolation import TestSchema

    schema = TestSchema(app_under_test(request.config))
    schema.create()
    try:
        yield schema
    finally:
        schema.drop()


@pytest.fixture
def tenure_app(tenure_test_schema: TestSchema) -> Iterator[Tenure]:
    """The app under test, on the session's test schema, emptied before this test: what the test
    enqueues (through the app, its tasks or its clients) no other worker sees."""
    with tenure_test_schema.use() as app:
        yield app


@pytest.fixture
def tenure_inline_sync(tenure_app: Tenure) -> Iterator[SyncInline]:
    """`SyncInline` on the isolated app: assertions and runs without asyncio."""
    from tenure.testing.sync.inline import SyncInline

    with SyncInline(tenure_app) as t:
        yield t


async def _inline(tenure_app: Tenure) -> AsyncIterator[Inline]:
    """`Inline` on the isolated app, in the test's event loop (pytest-asyncio, strict or auto)."""
    from tenure.testing.inline import Inline

    async with Inline(tenure_app) as t:
        yield t


def _without_pytest_asyncio() -> Any:
    raise pytest.UsageError(
        "tenure_inline is an async fixture and needs pytest-asyncio (pip install pytest-asyncio); "
        "a blocking test takes tenure_inline_sync"
    )


tenure_inline: Any
try:
    import pytest_asyncio
except ImportError:  # async tests cannot run without it either: say so to the one that asks
    tenure_inline = pytest.fixture(name="tenure_inline")(_without_pytest_asyncio)
else:
    tenure_inline = pytest_asyncio.fixture(_inline, name="tenure_inline", loop_scope="function")
