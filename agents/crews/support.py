"""``support``: reads a free-text message and routes it to the right specialist crew.

Routing is one chat completion with a tool per specialist (the model picks by
function calling); the chosen crew then answers. Without an order number an
order or returns question gets a request for it instead of a crew run.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agents.crews.models import SupportInput
from agents.crews.specialists import run_specialist
from agents.llm.runtime import get_model
from agents.tools.functions import ORDER_ID, SKU

_ROUTES = {
    "route_to_order_specialist": ("order", "Order status, shipping, delivery, tracking, carrier, where is my package or parcel, order number."),
    "route_to_returns_specialist": ("returns", "Returns, refunds, exchanges, send back, damaged, broken or wrong item, return policy."),
    "route_to_product_specialist": ("product", "Product information: stock, inventory, availability, price, sizes, warranty, specifications."),
}
_PARAMETERS = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "the customer's question, restated"},
        "order_id": {"type": "string", "description": "order number if the customer gave one, e.g. ORD-12345"},
        "sku": {"type": "string", "description": "product SKU if the customer gave one, e.g. SKU-1001"},
    },
    "required": ["question"],
}
TOOLS = [{"type": "function", "function": {"name": name, "description": desc, "parameters": _PARAMETERS}} for name, (_, desc) in _ROUTES.items()]
SYSTEM = "You are the front desk of an online outdoor shop. Route every customer message to exactly one specialist by calling its tool."


async def route(query: str) -> tuple[str | None, dict[str, Any], str | None]:
    """(specialist or None, tool arguments, the model's text when it did not route)."""
    result = await get_model().chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": query}], tools=TOOLS)
    for call in result.tool_calls:
        name = call["function"]["name"]
        if name in _ROUTES:
            try:
                args = json.loads(call["function"]["arguments"] or "{}")
            except ValueError:
                args = {}
            return _ROUTES[name][0], args if isinstance(args, dict) else {}, None
    return None, {}, result.content


def _clean(value: Any, pattern: str) -> str | None:
    """The model's argument when it has the shape of what it names, else None (asked for again, or left out): the
    model is untrusted, and its text went into the crew's task as it was (600 KB of it billed on the next call; its
    braces read as the task's own placeholders)."""
    value = value.strip() if isinstance(value, str) else ""
    return value if re.fullmatch(pattern, value) else None


async def support(data: SupportInput) -> dict[str, Any]:
    """Route a customer's message to order, returns or product, and return that crew's answer."""
    kind, args, text = await route(data.query)
    base = {"customer_id": data.customer_id, "routed_to": kind}
    if kind is None:
        return {**base, "answer": text or "Could you tell me a little more about what you need?"}
    order_id, sku = _clean(args.get("order_id"), ORDER_ID), _clean(args.get("sku"), SKU)
    question = data.query
    if kind in ("order", "returns") and order_id is None:
        return {**base, "answer": "I can help with that. Could you share your order number (it looks like ORD-12345)?"}
    inputs = {"customer": data.customer_id, "question": question, "order_id": order_id or "", "item": sku or "the item", "reason": "see the message"}
    answer = await run_specialist(kind, inputs)
    return {**base, **answer}
