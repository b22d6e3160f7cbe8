"""Workflows as a caller writes them: steps of tasks, each waiting for the steps it names, and
the shapes most work takes (a chain, a fan-out with its fan-in) in one call each.

    wf = Workflow("import 7")
    fetched = wf.step(fetch.bind(url=url))
    rows = wf.group([parse.bind(row=i) for i in range(3)], after=fetched, input="text")
    wf.step(summarize.bind(), after=rows, input="counts")
    await app.enqueue_workflow(wf, conn=conn)

A step's `input` names the handler argument that receives the results of the steps it waits
for: the one result when `after` is one step, the list of results (in `after`'s order) when it is
a list. Nothing is written here: the client checks every step as it checks a job
(tenure.producer.builder) and writes the workflow in one statement (docs/workflows.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenure.model.conditions import Condition, step_condition
from tenure.model.errors import ValidationError
from tenure.model.jobs import JobSpec
from tenure.model.workflows import MAX_STEPS, ON_DEAD, OnDead
from tenure.producer.builder import JobBuilder
from tenure.tasks import AnyTask, BoundCall, Task


@dataclass(frozen=True, eq=False)
class Step:
    """A step of one workflow, to name in another step's `after`."""

    workflow: Workflow = field(repr=False)
    name: str


@dataclass(frozen=True)
class StepDraft:
    """One step as declared: what the client checks and writes."""

    name: str
    task: AnyTask | str
    payload: dict[str, Any]
    after: tuple[str, ...]
    input_arg: str | None
    input_kind: str | None
    queue: str | None
    priority: int | None
    max_attempts: int | None
    result_wanted: bool
    condition: dict[str, Any] | None = None


Call = BoundCall | AnyTask


def _call(call: Call) -> tuple[AnyTask, dict[str, Any]]:
    if isinstance(call, BoundCall):
        return call.task, call.payload
    if isinstance(call, Task):
        return call, {}
    raise ValidationError(
        f"a workflow step takes a task or task.bind(...), got {type(call).__name__}: "
        "bind the handler's arguments with task.bind(name=value, ...)"
    )


class Workflow:
    """Steps and what each waits for, enqueued together (Client.enqueue_workflow). Steps whose
    dependencies have all succeeded run as ordinary jobs of their task; see docs/workflows.md.

    `on_dead` says what happens to the steps after a step that goes dead: "hold" (the default)
    keeps them waiting until the dead step is reprocessed and succeeds; "cancel" cancels them.
    """

    def __init__(self, name: str = "workflow", *, on_dead: OnDead = "hold") -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= 200:
            raise ValidationError(f"a workflow's name must be 1 to 200 characters, got {name!r}")
        if on_dead not in ON_DEAD:
            raise ValidationError(
                f"on_dead must be 'hold' or 'cancel', got {on_dead!r}: hold keeps the steps after a "
                "dead step waiting for its reprocess; cancel cancels them"
            )
        self.name = name
        self.on_dead: OnDead = on_dead
        self.drafts: list[StepDraft] = []
        self._names: set[str] = set()

    def __len__(self) -> int:
        return len(self.drafts)

    def step(
        self,
        call: Call,
        *,
        after: Step | Sequence[Step] = (),
        input: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        result_wanted: bool = False,
        wait_for: Condition | Sequence[Condition] | None = None,
        skip_if: Condition | Sequence[Condition] | None = None,
        cancel_if: Condition | Sequence[Condition] | None = None,
    ) -> Step:
        """Adds a step of `call` (a task, or `task.bind(...)` with some of its arguments) that
        runs once every step in `after` has succeeded. With `input`, the handler argument of that
        name receives their results: one result for one step, a list for a list. `name` defaults
        to the task's name, numbered when taken (`parse`, `parse-2`, ...). Options left out come
        from the task's policy, as for a job.

        A step may also wait, once its dependencies have succeeded, for the world:
        `wait_for=Signalled(key)` or `Elapsed(duration)` (or a list of one of each: whichever comes
        first) runs it; `skip_if=` skips it (it succeeds with no result, and the steps after it go
        on); `cancel_if=` cancels it and the steps after it. One signal key and one time in all
        (tenure.model.conditions); the handler reads how it ended with `ctx.step_condition()`."""
        task, payload = _call(call)
        condition = step_condition(wait_for, skip_if, cancel_if)
        parents = (after,) if isinstance(after, Step) else tuple(after)
        for parent in parents:
            if not isinstance(parent, Step) or parent.workflow is not self:
                raise ValidationError(
                    f"after= takes steps of this workflow (what its step() returned), got {parent!r}"
                )
        if len({p.name for p in parents}) != len(parents):
            raise ValidationError(f"after= names a step twice: {[p.name for p in parents]}")
        if input is not None:
            if not parents:
                raise ValidationError(
                    f"input={input!r} passes the results of the steps in after=, and this step has none"
                )
            if not isinstance(input, str) or not input.isidentifier():
                raise ValidationError(f"input= names a handler argument, got {input!r}")
            if input in payload:
                raise ValidationError(
                    f"input={input!r} is also an argument bound by task.bind(): the workflow fills it "
                    "with the results of the steps before; bind the others only"
                )
        if len(self.drafts) >= MAX_STEPS:
            raise ValidationError(f"a workflow has at most {MAX_STEPS} steps: split the work into several")
        chosen = self._free_name(task.name if name is None else name, numbered=name is None)
        self.drafts.append(
            StepDraft(
                chosen,
                task,
                payload,
                tuple(p.name for p in parents),
                input,
                None if input is None else ("one" if isinstance(after, Step) else "list"),
                queue,
                priority,
                max_attempts,
                result_wanted,
                condition,
            )
        )
        self._names.add(chosen)
        return Step(self, chosen)

    def group(
        self,
        calls: Iterable[Call],
        *,
        after: Step | Sequence[Step] = (),
        input: str | None = None,
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> list[Step]:
        """Steps that run side by side, each after the same `after`: a fan-out. `name` is the
        prefix of their names (`name-1`, `name-2`, ...; default: each task's name, numbered)."""
        steps = []
        for i, call in enumerate(calls, start=1):
            steps.append(
                self.step(
                    call,
                    after=after,
                    input=input,
                    name=None if name is None else f"{name}-{i}",
                    queue=queue,
                    priority=priority,
                    max_attempts=max_attempts,
                )
            )
        if not steps:
            raise ValidationError("a group needs at least one step")
        return steps

    def _free_name(self, wanted: str, *, numbered: bool) -> str:
        if not isinstance(wanted, str) or not 1 <= len(wanted) <= 180:
            raise ValidationError(f"a step's name must be 1 to 180 characters, got {wanted!r}")
        if wanted not in self._names:
            return wanted
        if not numbered:
            raise ValidationError(
                f"two steps of workflow {self.name!r} are named {wanted!r}: give each its own"
            )
        n = 2
        while f"{wanted}-{n}" in self._names:
            n += 1
        return f"{wanted}-{n}"


def chain(*calls: Call, input: str | None = None, name: str = "chain", on_dead: OnDead = "hold") -> Workflow:
    """Steps that run one after another; with `input`, each step after the first receives the
    previous step's result as that argument."""
    if not calls:
        raise ValidationError("a chain needs at least one step")
    wf = Workflow(name, on_dead=on_dead)
    previous: Step | None = None
    for call in calls:
        previous = wf.step(
            call, after=() if previous is None else previous, input=None if previous is None else input
        )
    return wf


def fan_in(
    calls: Iterable[Call],
    then: Call,
    *,
    input: str | None = None,
    name: str = "fan-in",
    on_dead: OnDead = "hold",
) -> Workflow:
    """Steps that run side by side, then one step that runs once all have succeeded; with
    `input`, it receives the list of their results, in the order of `calls`."""
    wf = Workflow(name, on_dead=on_dead)
    group = wf.group(calls)
    wf.step(then, after=group, input=input)
    return wf


def stored_steps(wf: Workflow, builder: JobBuilder) -> list[dict[str, Any]]:
    """The workflow's steps as enqueue_workflow() takes them, each checked by the client's
    builder as a job of its task is: its payload against the handler
    (the input argument counted as given), its options completed from the task's policy."""
    if not wf.drafts:
        raise ValidationError(f"workflow {wf.name!r} has no steps: add them with step(), group() or after=")
    steps = []
    for d in wf.drafts:
        spec = JobSpec(
            task=d.task.name if isinstance(d.task, Task) else d.task,
            payload=d.payload,
            queue=d.queue,
            priority=d.priority,
            max_attempts=d.max_attempts,
            result_wanted=d.result_wanted,
            unique=False,
        )
        known = d.task if isinstance(d.task, Task) else None
        if known is not None and d.input_arg is not None and not known.takes(d.input_arg):
            raise ValidationError(
                f"step {d.name!r} of workflow {wf.name!r}: input={d.input_arg!r} names no argument of "
                f"task {known.name!r}, whose arguments are ({known.parameters()}): name the one that "
                "takes the results"
            )
        try:
            checked, _ = builder.check_json(spec, known, filled=() if d.input_arg is None else (d.input_arg,))
        except ValidationError as exc:
            raise ValidationError(f"step {d.name!r} of workflow {wf.name!r}: {exc}") from None
        steps.append(
            {
                "name": d.name,
                "task": checked.task,
                "payload": checked.payload,
                "queue": checked.queue,
                "priority": checked.priority,
                "max_attempts": checked.max_attempts,
                "result_wanted": checked.result_wanted,
                "after": list(d.after),
                "input_arg": d.input_arg,
                "input_kind": d.input_kind,
                "condition": d.condition,
            }
        )
    return steps
