"""The agent registry: names to callables, with input models and per-agent defaults.

An agent is ``async def fn(data, ctx)`` or a plain ``def`` (run in a thread
pool so it never blocks the worker's event loop and its lease heartbeats).
``ctx`` is optional in the signature. With ``input_model``, ``data`` arrives
as a validated instance; invalid input ends the job ``rejected``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from streams.workflow import WORKFLOW_AGENT


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an agent may know of the job it runs."""

    job_id: str
    agent: str
    attempt: int
    max_attempts: int
    tenant: str | None = None
    traceparent: str | None = None
    parent: str | None = None
    """The workflow this job is a step of (contract §9), and the step's id."""
    step: str | None = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """A workflow step's dependencies' results, ``{step id: result}``; empty outside workflows."""

    def with_inputs(self, text: str) -> str:
        """``text`` followed by the dependencies' results, for an LLM task that builds on earlier steps."""
        if not self.inputs:
            return text
        lines = [text, "", "Results of the earlier steps this one builds on:"]
        for step, result in self.inputs.items():
            answer = result.get("answer") if isinstance(result, dict) else None
            lines.append(f"- {step}: {answer if isinstance(answer, str) else json.dumps(result, default=str)[:2000]}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class AgentSpec:
    name: str
    fn: Callable[..., Any]
    input_model: type[BaseModel] | None = None
    timeout_s: float | None = None
    max_attempts: int | None = None
    is_async: bool = True
    wants_ctx: bool = False
    description: str = ""
    unavailable: str | None = None
    """Why this worker cannot run the agent (a stand-in: CrewAI missing), so a workflow naming it is rejected up front."""


class UnknownAgent(KeyError):
    """Raised when no agent of that name is registered."""

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        super().__init__(name)
        self.name = name
        self.known = sorted(known)

    def __str__(self) -> str:
        known = f"; known: {', '.join(self.known)}" if self.known else ""
        return f"unknown agent {self.name!r}{known}"


class AgentRegistry:
    """A mapping of agent names to specs; the worker serves one registry."""

    def __init__(self) -> None:
        self._specs: dict[str, AgentSpec] = {}
        self._aliases: dict[str, str] = {}

    def register(
        self,
        name: str | None = None,
        *,
        input_model: type[BaseModel] | None = None,
        timeout_s: float | None = None,
        max_attempts: int | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``@registry.register("summarize", input_model=Doc, timeout_s=120)``."""

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(fn, name=name or fn.__name__, input_model=input_model, timeout_s=timeout_s, max_attempts=max_attempts)
            return fn

        return decorate

    def add(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        input_model: type[BaseModel] | None = None,
        timeout_s: float | None = None,
        max_attempts: int | None = None,
        unavailable: str | None = None,
    ) -> AgentSpec:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"agent {name!r}: max_attempts must be >= 1")
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        spec = AgentSpec(
            name=name,
            fn=fn,
            input_model=input_model,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            is_async=inspect.iscoroutinefunction(fn),
            wants_ctx=len(params) >= 2,
            description=(inspect.getdoc(fn) or "").split("\n", 1)[0],
            unavailable=unavailable,
        )
        self._specs[name] = spec
        return spec

    def alias(self, alias: str, target: str) -> None:
        """Serve ``target`` also under ``alias``; results carry the name the request used."""
        self._specs[alias] = self.get(target)
        self._aliases[alias] = target

    def get(self, name: str) -> AgentSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownAgent(name, self._specs) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def names(self) -> list[str]:
        return sorted(self._specs)

    def subset(self, names: Iterable[str]) -> AgentRegistry:
        """A registry with only ``names`` and their aliases; an unknown name is an error, not a silent no-op.
        ``workflow`` may be named: every worker runs workflows (contract §9), it is not a registered agent."""
        chosen = AgentRegistry()
        for name in names:
            if name != WORKFLOW_AGENT:
                chosen._specs[name] = self.get(name)
        for alias, target in self._aliases.items():
            if target in chosen._specs:
                chosen.alias(alias, target)
        return chosen


default_registry = AgentRegistry()
agent = default_registry.register
