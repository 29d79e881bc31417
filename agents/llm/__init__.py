"""LLM access for agents: provider clients over aiohttp, the offline model, pricing and keys.

``LLMClient`` is imported on first use: aiohttp costs a worker that runs
offline (or without LLM agents) most of a second at start-up.
"""

from typing import TYPE_CHECKING, Any

from agents.llm.errors import LLMError, LLMRequestError, LLMUnavailable
from agents.llm.offline import OFFLINE_MODEL, OfflineModel
from agents.llm.pricing import Price, PriceTable
from agents.llm.providers import ChatModel, ChatResult
from agents.llm.runtime import aclose, configure, get_model
from agents.llm.settings import LLMSettings

if TYPE_CHECKING:
    from agents.llm.client import LLMClient


def __getattr__(name: str) -> Any:
    if name == "LLMClient":
        from agents.llm.client import LLMClient

        return LLMClient
    raise AttributeError(f"module 'agents.llm' has no attribute {name!r}")


__all__ = [
    "OFFLINE_MODEL", "ChatModel", "ChatResult", "LLMClient", "LLMError", "LLMRequestError", "LLMSettings",
    "LLMUnavailable", "OfflineModel", "Price", "PriceTable", "aclose", "configure", "get_model",
]
