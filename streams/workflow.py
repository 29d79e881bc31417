"""Workflows (contract §9): the graph of steps, its validation, and the ``Workflow`` builder producers use.

A workflow is a request for the built-in agent ``workflow`` whose ``data`` holds
``steps`` (each ``{"id", "agent", "data", "after"}``), ``on_failure``,
``timeout_s`` and ``priority``. Everything that can be checked before a step runs is checked
here, and each problem names the step it is about.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streams.envelope import MAX_ATTEMPTS, MAX_TIMEOUT_S
from streams.envelope import WORKFLOW_AGENT as WORKFLOW_AGENT  # re-exported: where it was defined first
from streams.keys import STEP_SEPARATOR

MAX_STEPS = 1000
STEP_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def step_job_id(workflow_id: str, step_id: str) -> str:
    """A step's job id, ``<workflow id>::<step id>``: unlike any generated id, and in its workflow's partition."""
    return f"{workflow_id}{STEP_SEPARATOR}{step_id}"


MAX_WORKFLOW_TIMEOUT_S = 30 * 86_400  # a month


class WorkflowInvalid(ValueError):
    """Raised when a workflow's graph is invalid; the message names the step."""


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    agent: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)
    after: list[str] = Field(default_factory=list)
    # A step's entry is a request: its bounds. Strict: JSON's true is no number of attempts or seconds.
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS, strict=True)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, strict=True)


class WorkflowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[StepSpec]
    on_failure: Literal["fail", "continue"] = "fail"
    # Bounded: a workflow waits in the timeouts set until it is due (1e308 was infinity there, kept for good).
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_WORKFLOW_TIMEOUT_S, allow_inf_nan=False, strict=True)
    # A producer given no priority picks the workflow's lane by this one (contract §13), and its steps run there;
    # checked here only, as the crews check theirs.
    priority: int | None = Field(default=None, ge=0, le=10, strict=True)

    def dependents(self) -> dict[str, list[str]]:
        """For each step, the steps that name it in their ``after``."""
        kids: dict[str, list[str]] = {s.id: [] for s in self.steps}
        for s in self.steps:
            for dep in s.after:
                kids[dep].append(s.id)
        return kids


def parse_workflow(data: dict[str, Any]) -> WorkflowSpec:
    """Validate a workflow's ``data``: shape, step ids, ``after``, size and acyclicity."""
    raw_steps = data.get("steps")
    if isinstance(raw_steps, list) and len(raw_steps) > MAX_STEPS:
        raise WorkflowInvalid(f"workflow has {len(raw_steps)} steps, over the limit of {MAX_STEPS}")
    try:
        spec = WorkflowSpec.model_validate(data)
    except ValidationError as exc:
        raise WorkflowInvalid(_describe(exc, raw_steps)) from None
    if not spec.steps:
        raise WorkflowInvalid("workflow has no steps")
    seen: set[str] = set()
    for s in spec.steps:
        if not STEP_ID.fullmatch(s.id):  # not match: its '$' lets a final newline through
            raise WorkflowInvalid(f"step {s.id!r}: id must match [A-Za-z0-9_.-]{{1,64}}")
        if s.id in seen:
            raise WorkflowInvalid(f"step {s.id!r}: duplicate step id")
        seen.add(s.id)
        if s.agent == WORKFLOW_AGENT:
            raise WorkflowInvalid(f"step {s.id!r}: a step cannot be a workflow")
    for s in spec.steps:
        for dep in s.after:
            if dep not in seen:
                raise WorkflowInvalid(f"step {s.id!r}: after names unknown step {dep!r}")
            if dep == s.id:
                raise WorkflowInvalid(f"step {s.id!r}: a step cannot run after itself")
        if len(set(s.after)) != len(s.after):
            raise WorkflowInvalid(f"step {s.id!r}: after names a step twice")
    if cycle := _cycle(spec):
        raise WorkflowInvalid(f"steps {', '.join(repr(c) for c in cycle)} form a cycle")
    return spec


def _cycle(spec: WorkflowSpec) -> list[str]:
    """The steps left when every step whose dependencies can complete is removed (Kahn); empty if acyclic."""
    waiting = {s.id: len(s.after) for s in spec.steps}
    kids = spec.dependents()
    ready = [sid for sid, n in waiting.items() if n == 0]
    while ready:
        sid = ready.pop()
        for kid in kids[sid]:
            waiting[kid] -= 1
            if waiting[kid] == 0:
                ready.append(kid)
        del waiting[sid]
    return sorted(waiting)


def _describe(exc: ValidationError, raw_steps: Any) -> str:
    parts = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = ".".join(str(p) for p in loc) or "data"
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            step = raw_steps[loc[1]] if isinstance(raw_steps, list) else None
            name = step.get("id") if isinstance(step, dict) else None
            label = f"step {name!r}" if isinstance(name, str) else f"step #{loc[1] + 1}"
            where = f"{label}: field {'.'.join(str(p) for p in loc[2:]) or 'step'!r}"
        else:
            where = f"field {where!r}"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


class Workflow:
    """Build a workflow for any producer: ``wf.step("pricing", "product", {...}, after=["reviews"])``.

    Publish it with :meth:`streams.producer.Producer.publish_workflow`, or send
    :meth:`to_data` as the ``data`` of agent ``workflow`` (gateway, ``submit``).
    """

    def __init__(self, id: str | None = None, *, on_failure: Literal["fail", "continue"] = "fail", timeout_s: float | None = None) -> None:
        self.id = id
        self.on_failure = on_failure
        self.timeout_s = timeout_s
        self._steps: list[dict[str, Any]] = []

    def step(
        self, id: str, agent: str, data: dict[str, Any] | None = None, *, after: str | Iterable[str] = (),
        max_attempts: int | None = None, timeout_s: float | None = None,
    ) -> str:
        """Add a step; returns its id (handy as another step's ``after``: one id, or a list of them; a lone string was
        read as a list of its characters, ``after="ab"`` as steps ``a`` and ``b``)."""
        step: dict[str, Any] = {"id": id, "agent": agent, "data": data or {}}
        if after := [after] if isinstance(after, str) else list(after):
            step["after"] = after
        if max_attempts is not None:
            step["max_attempts"] = max_attempts
        if timeout_s is not None:
            step["timeout_s"] = timeout_s
        self._steps.append(step)
        return id

    def to_data(self) -> dict[str, Any]:
        """The request's ``data``; raises :class:`WorkflowInvalid` when the graph is invalid."""
        data: dict[str, Any] = {"steps": list(self._steps), "on_failure": self.on_failure}
        if self.timeout_s is not None:
            data["timeout_s"] = self.timeout_s
        parse_workflow(data)
        return data
