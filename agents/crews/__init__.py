"""CrewAI crews for e-commerce support: ``order``, ``returns``, ``product`` and the routing ``support``.

Importing this package imports CrewAI (a couple of seconds), after setting
CrewAI's environment defaults (no telemetry, tracing or version check;
storage outside the user's home).
"""

from agents.crews import _env  # noqa: F401  (must run before crewai is imported)
from agents.crews.agents import order, product, returns
from agents.crews.executor import configure_executor
from agents.crews.llm import StreamcrewLLM
from agents.crews.models import OrderInput, ProductInput, ReturnsInput, SupportInput
from agents.crews.specialists import build_crew, run_specialist
from agents.crews.support import support
from agents.registry import AgentRegistry

CREW_TIMEOUT_S = 300.0


def register_crews(registry: AgentRegistry) -> None:
    """Add ``order``, ``returns``, ``product`` and ``support`` to ``registry``."""
    registry.add(order, name="order", input_model=OrderInput, timeout_s=CREW_TIMEOUT_S)
    registry.add(returns, name="returns", input_model=ReturnsInput, timeout_s=CREW_TIMEOUT_S)
    registry.add(product, name="product", input_model=ProductInput, timeout_s=CREW_TIMEOUT_S)
    registry.add(support, name="support", input_model=SupportInput, timeout_s=CREW_TIMEOUT_S)


__all__ = [
    "OrderInput", "ProductInput", "ReturnsInput", "StreamcrewLLM", "SupportInput", "build_crew",
    "configure_executor", "order", "product", "register_crews", "returns", "run_specialist", "support",
]
