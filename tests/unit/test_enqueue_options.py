"""The typed option bags (enqueue options, task policy options) name exactly what their targets take."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta
from typing import Any

import pytest

from tenure.model.jobs import JobSpec
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


def test_an_unknown_enqueue_option_is_refused_by_name() -> None:
    """An untyped caller's misspelt option (`dealy=5`) is an error naming it and the options, not a
    job enqueued without its delay."""
    builder = JobBuilder(None, max_payload_bytes=1000)
    with pytest.raises(TypeError, match=r"unknown enqueue option\(s\) 'dealy': the options are queue, "):
        builder.spec_json("t", {}, queue="q", dealy=5)  # type: ignore[call-arg]


def test_a_job_built_from_options_carries_the_json_its_checks_encoded() -> None:
    """The payload text the insert sends is the compact JSON the size check measured, and the
    options reach the spec (a timedelta delay as seconds)."""
    spec, text = JobBuilder(None, max_payload_bytes=1000).spec_json(
        "t", {"name": "Zoë", "n": [1, 2]}, queue="q", delay=timedelta(seconds=3), priority=5
    )
    assert text == '{"name":"Zoë","n":[1,2]}'
    assert (spec.queue, spec.delay, spec.priority, spec.max_attempts) == ("q", 3.0, 5, 20)


def test_a_completed_spec_carries_every_field_the_client_does_not_fill() -> None:
    """JobSpec.completed is dataclasses.replace written out: each field keeps its value, whatever
    fields the class gains, and only the four options change."""
    values: dict[str, Any] = {f.name: object() for f in dataclasses.fields(JobSpec)}
    spec = JobSpec(**values)
    filled = {"queue": "q", "priority": 7, "max_attempts": 3, "unique": object()}
    assert spec.completed(**filled) == dataclasses.replace(spec, **filled)
    assert all(
        getattr(spec.completed(**filled), name) is value for name, value in {**values, **filled}.items()
    )
