"""The agent functions the worker calls: validated input in, a crew's answer out."""

from __future__ import annotations

from typing import Any

from agents.crews.models import OrderInput, ProductInput, ReturnsInput
from agents.crews.specialists import run_specialist


async def order(data: OrderInput) -> dict[str, Any]:
    """Order status, shipping and tracking, answered by the order crew."""
    return await run_specialist("order", {"customer": "(not given)", "order_id": data.order_id, "question": data.question})


async def returns(data: ReturnsInput) -> dict[str, Any]:
    """Returns and refunds, handled by the returns crew."""
    inputs = {"customer": "(not given)", "order_id": data.order_id, "item": data.sku or "the whole order", "reason": data.reason, "question": data.question}
    return await run_specialist("returns", inputs)


async def product(data: ProductInput) -> dict[str, Any]:
    """Stock, price and product questions, answered by the product crew."""
    item = data.sku or "a product"
    return await run_specialist("product", {"customer": "(not given)", "item": item, "question": data.question})
