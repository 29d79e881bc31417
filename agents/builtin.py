"""The agents every worker serves unless told otherwise."""

from __future__ import annotations

from importlib.util import find_spec

from agents.ask import register_ask
from agents.echo import register_echo
from agents.registry import AgentRegistry


def builtin_registry() -> AgentRegistry:
    """A registry with ``echo``, ``ask`` and, when CrewAI is installed, the support crews.

    The crews module is imported whenever CrewAI is present, so a broken
    crews module fails here, loudly, instead of silently serving fewer agents.
    """
    registry = AgentRegistry()
    register_echo(registry)
    register_ask(registry)
    if find_spec("agents.crews") is not None and find_spec("crewai") is not None:
        from agents.crews import register_crews

        register_crews(registry)
    return registry
