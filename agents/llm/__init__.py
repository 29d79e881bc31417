"""LLM access for agents: provider clients over aiohttp, the offline model, pricing and keys."""

from agents.llm.client import LLMClient
from agents.llm.errors import LLMError, LLMRequestError, LLMUnavailable
from agents.llm.offline import OFFLINE_MODEL, OfflineModel
from agents.llm.pricing import Price, PriceTable
from agents.llm.providers import ChatModel, ChatResult
from agents.llm.runtime import aclose, configure, get_model
from agents.llm.settings import LLMSettings

__all__ = [
    "OFFLINE_MODEL", "ChatModel", "ChatResult", "LLMClient", "LLMError", "LLMRequestError", "LLMSettings",
    "LLMUnavailable", "OfflineModel", "Price", "PriceTable", "aclose", "configure", "get_model",
]
