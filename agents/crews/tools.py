"""The support tools as CrewAI tools: each one's ``args_schema`` is its pydantic input model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crewai.tools import BaseTool
from pydantic import BaseModel, ValidationError

from agents.tools import functions as fn


class _CatalogueTool(BaseTool):
    """Validates its arguments with the input model, then calls the plain function."""

    def _run(self, **kwargs: Any) -> str:
        model, call = _TOOLS[self.name]
        try:
            args = model.model_validate(kwargs)
        except ValidationError as exc:
            details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors())
            return f'{{"error": "invalid input for {self.name}: {details}"}}'
        return call(args)


_TOOLS: dict[str, tuple[type[BaseModel], Callable[[Any], str]]] = {
    "lookup_order": (fn.LookupOrderInput, fn.lookup_order),
    "check_inventory": (fn.CheckInventoryInput, fn.check_inventory),
    "process_return": (fn.ProcessReturnInput, fn.process_return),
    "search_knowledge_base": (fn.SearchKnowledgeBaseInput, fn.search_knowledge_base),
}
_DESCRIPTIONS = {
    "lookup_order": "Look up an order by its order number: status, carrier, tracking number, dates and items.",
    "check_inventory": "Check stock level, availability and price of a product by SKU, or find products by name.",
    "process_return": "Request a return and refund for a delivered order (optionally one item): checks the return window and issues an RMA number.",
    "search_knowledge_base": "Search the FAQ and the return policy: shipping times, warranty, international delivery, how returns and refunds work.",
}


def make_tool(name: str) -> BaseTool:
    model, _ = _TOOLS[name]
    return _CatalogueTool(name=name, description=_DESCRIPTIONS[name], args_schema=model)
