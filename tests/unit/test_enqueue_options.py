"""The enqueue options a task's `with_options` takes are exactly those of every enqueue."""

from __future__ import annotations

import inspect

from tenure.producer.builder import JobBuilder
from tenure.tasks import ENQUEUE_OPTIONS


def test_with_options_takes_the_keywords_of_every_enqueue() -> None:
    """ENQUEUE_OPTIONS names JobBuilder.spec's keywords, in order: the two cannot drift apart."""
    keywords = [
        name
        for name, p in inspect.signature(JobBuilder.spec).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert list(ENQUEUE_OPTIONS) == keywords
