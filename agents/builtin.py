"""The agents every worker serves unless told otherwise."""

from __future__ import annotations

from agents.echo import register_echo
from agents.registry import AgentRegistry


def builtin_registry() -> AgentRegistry:
    """A registry with the built-in agents: ``echo`` (LLM agents are added when their module is present)."""
    registry = AgentRegistry()
    register_echo(registry)
    try:
        from agents.crews import register_crews
    except ImportError:
        return registry
    register_crews(registry)
    return registry
