"""The agents every worker serves unless told otherwise."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.util import find_spec
from typing import Any

from agents.ask import register_ask
from agents.echo import register_echo
from agents.registry import AgentRegistry
from streams.errors import Reject

CREW_AGENTS = ("order", "product", "returns", "support")
# The first design's names for three of the crews (contract §13), served with or without CrewAI.
DESIGN_ALIASES = {"order_processing": "order", "returns_processing": "returns", "product_info": "product"}
CREWAI_EXTRA = "pip install 'streamcrew[crewai]'"
NEEDS_CREWAI = f"needs CrewAI, which this worker does not have: {CREWAI_EXTRA}"


def crewai_installed() -> bool:
    return find_spec("crewai") is not None


def builtin_registry(only: Iterable[str] | None = None) -> AgentRegistry:
    """A registry with ``echo``, ``ask`` and the support crews (all, or those in ``only``).

    CrewAI (a ~3 s import) is imported only when a crew agent is wanted. Without
    CrewAI installed the crew names are still served, by stand-ins whose jobs end
    ``rejected`` naming the extra to install: a clear result, never a crash. With
    CrewAI present a broken crews module fails here, loudly.
    """
    wanted = {DESIGN_ALIASES.get(name, name) for name in only} if only is not None else None  # an alias wants its crew
    registry = AgentRegistry()
    register_echo(registry)
    register_ask(registry)
    crews = [name for name in CREW_AGENTS if wanted is None or name in wanted]
    if not crews:
        return registry
    if crewai_installed():
        from agents.crews import register_crews

        register_crews(registry)
    else:
        for name in crews:
            registry.add(_needs_crewai(name), name=name, unavailable=NEEDS_CREWAI)
        for alias, target in DESIGN_ALIASES.items():  # so their jobs get the same advice, not "unknown agent"
            if target in crews:
                registry.alias(alias, target)
    return registry


def missing_crewai(registry: AgentRegistry) -> list[str]:
    """The agents of ``registry`` that cannot run here because CrewAI is not installed."""
    if crewai_installed():
        return []
    return [name for name in CREW_AGENTS if name in registry]


def _needs_crewai(name: str) -> Any:
    async def needs_crewai(data: dict[str, Any]) -> None:
        raise Reject(f"agent {name!r} {NEEDS_CREWAI}")

    needs_crewai.__doc__ = f"Stand-in for the {name!r} crew: CrewAI is not installed ({CREWAI_EXTRA})."
    return needs_crewai
