"""CrewAI crews for e-commerce support: ``order``, ``returns``, ``product`` and the routing ``support``.

The first design's names ``order_processing``, ``returns_processing`` and
``product_info`` are aliases of the three specialists (contract §13).

Importing this package imports CrewAI (a couple of seconds), after setting
CrewAI's environment defaults (no telemetry, tracing or version check;
storage outside the user's home).
"""

from agents.crews import _env  # noqa: F401  (must run before crewai is imported)
from agents.crews.agents import order, product, returns, support_desk
from agents.crews.design import DESIGN_ALIASES, answer_design_request
from agents.crews.executor import configure_executor
from agents.crews.llm import StreamcrewLLM
from agents.crews.models import (
    DesignRequest,
    OrderInput,
    OrderRequest,
    ProductInput,
    ProductRequest,
    ReturnsInput,
    ReturnsRequest,
    SupportInput,
    SupportRequest,
)
from agents.crews.specialists import build_crew, run_specialist, task_inputs
from agents.crews.support import support
from agents.registry import AgentRegistry

CREW_TIMEOUT_S = 300.0


def register_crews(registry: AgentRegistry) -> None:
    """Add ``order``, ``returns``, ``product``, ``support`` and the first design's aliases to ``registry``."""
    registry.add(order, name="order", input_model=OrderRequest, timeout_s=CREW_TIMEOUT_S)
    registry.add(returns, name="returns", input_model=ReturnsRequest, timeout_s=CREW_TIMEOUT_S)
    registry.add(product, name="product", input_model=ProductRequest, timeout_s=CREW_TIMEOUT_S)
    registry.add(support_desk, name="support", input_model=SupportRequest, timeout_s=CREW_TIMEOUT_S)
    for alias, target in DESIGN_ALIASES.items():
        registry.alias(alias, target)


__all__ = [
    "DESIGN_ALIASES", "DesignRequest", "OrderInput", "OrderRequest", "ProductInput", "ProductRequest", "ReturnsInput",
    "ReturnsRequest", "StreamcrewLLM", "SupportInput", "SupportRequest", "answer_design_request", "build_crew",
    "configure_executor", "order", "product", "register_crews", "returns", "run_specialist", "support", "support_desk",
    "task_inputs",
]
