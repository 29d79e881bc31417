"""Support tools over a replaceable shop catalogue (usable with or without CrewAI)."""

from agents.tools.catalogue import Catalogue, JsonCatalogue, get_catalogue, set_catalogue
from agents.tools.functions import (
    CheckInventoryInput, LookupOrderInput, ProcessReturnInput, SearchKnowledgeBaseInput,
    check_inventory, lookup_order, process_return, search_knowledge_base,
)

__all__ = [
    "Catalogue", "CheckInventoryInput", "JsonCatalogue", "LookupOrderInput", "ProcessReturnInput",
    "SearchKnowledgeBaseInput", "check_inventory", "get_catalogue", "lookup_order", "process_return",
    "search_knowledge_base", "set_catalogue",
]
