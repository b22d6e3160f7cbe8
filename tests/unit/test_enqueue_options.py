"""The typed option bags (enqueue options, task policy options) name exactly what their targets take."""

from __future__ import annotations

import inspect

from tenure.producer.builder import JobBuilder
from tenure.tasks import ENQUEUE_OPTIONS, POLICY_FIELDS, TaskOptions


def test_with_options_takes_the_keywords_of_every_enqueue() -> None:
    """ENQUEUE_OPTIONS names JobBuilder.spec's keywords, in order: the two cannot drift apart."""
    keywords = [
        name
        for name, p in inspect.signature(JobBuilder.spec).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert list(ENQUEUE_OPTIONS) == keywords


def test_task_options_are_the_fields_of_a_task_policy() -> None:
    """TaskOptions names TaskPolicy's fields, in order: no policy field goes untyped at `app.task`."""
    assert list(TaskOptions.__annotations__) == list(POLICY_FIELDS)
