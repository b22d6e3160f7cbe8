"""Every blocking `_sync` name the README and the docs write exists where they write it, and each
verb a sentence promises "each with its `_sync` twin" has one on the app."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tenure
import tenure.testing.plugin

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Who a `name.verb_sync` is looked up on, by the name the docs give it; any other name (a task:
#: `send_receipt.enqueue_sync`) is a task or a task with options.
OWNERS: dict[str, tuple[Any, ...]] = {
    "app": (tenure.Tenure,),
    "ctx": (tenure.JobContext,),
    "tenure": (tenure,),
}
TASK_LIKE = (tenure.Task, tenure.tasks.TaskCall)
#: A bare name is looked up on all of these: the API, and the pytest plugin's fixtures.
EVERYWHERE = (tenure.Tenure, tenure.SyncClient, tenure.JobContext, tenure, tenure.testing.plugin, *TASK_LIKE)
#: `_sync` words that name no API: the generator of the blocking twins.
NOT_API = {"async_to_sync"}
QUALIFIED = re.compile(r"\b(\w+)\.(\w+_sync)\b")
BARE = re.compile(r"(?<![./\w])(\w+_sync)\b(?!\.py)")  # not a file: tests/test_orders_sync.py
TWINS_PROMISED = "each with its `_sync` twin"
VERB = re.compile(r"`(?:app\.)?(\w+)\(")


def sync_names(text: str) -> list[tuple[str | None, str]]:
    """(owner or None, name) of every `_sync` name in `text`."""
    found: list[tuple[str | None, str]] = [(m[1], m[2]) for m in QUALIFIED.finditer(text)]
    found += [(None, m[1]) for m in BARE.finditer(text) if m[1] not in NOT_API]
    return found


def missing_names(text: str) -> list[str]:
    """The `_sync` names of `text` that exist nowhere; those its examples define (`def x_sync(`)
    are theirs."""
    own = set(re.findall(r"\bdef (\w+_sync)\(", text))
    missing = []
    for owner, name in sync_names(text):
        if name in own:
            continue
        where = OWNERS.get(owner, TASK_LIKE) if owner is not None else EVERYWHERE
        if not any(hasattr(o, name) for o in where):
            missing.append(f"{owner}.{name}" if owner else name)
    return missing


def promised_twins(text: str) -> list[str]:
    """The verbs of each paragraph that says they come "each with its `_sync` twin"."""
    paragraphs = re.split(r"\n\s*\n", text)
    return [verb for p in paragraphs if TWINS_PROMISED in " ".join(p.split()) for verb in VERB.findall(p)]


def test_every_sync_name_the_docs_write_exists() -> None:
    """Each `X_sync` the README and docs name (app., ctx., a task's, or bare) is an attribute of
    what they call it on."""
    missing = {
        str(path.relative_to(ROOT)): names
        for path in DOCUMENTS
        if (names := missing_names(path.read_text(encoding="utf-8")))
    }
    assert missing == {}


def test_each_verb_promised_a_twin_has_one_on_the_app() -> None:
    """docs/workflows.md lists the workflow verbs, "each with its `_sync` twin": the app has each
    verb and its twin."""
    promised = [verb for path in DOCUMENTS for verb in promised_twins(path.read_text(encoding="utf-8"))]
    assert "list_workflows" in promised and len(promised) >= 5, promised
    lacking = [v for v in promised if not (hasattr(tenure.Tenure, v) and hasattr(tenure.Tenure, f"{v}_sync"))]
    assert lacking == []


def test_the_checks_find_a_name_that_does_not_exist() -> None:
    """The checks are not vacuous: a misspelt twin, on the app or bare, and a promised verb the
    app lacks are found."""
    assert missing_names("call `app.enqueue_sync()`, `app.enqeue_sync()` or `ctx.effect_sync`") == [
        "app.enqeue_sync"
    ]
    assert missing_names("the blocking `list_wrokflows_sync(...)`") == ["list_wrokflows_sync"]
    assert missing_names("def mine_sync(): ...\nmine_sync(); tenure_inline_sync; theirs_sync()") == [
        "theirs_sync"
    ]
    text = "On the app: `app.get_workflow(id)` and `frobnicate(id)`,\neach with its `_sync` twin."
    assert promised_twins(text) == ["get_workflow", "frobnicate"]
