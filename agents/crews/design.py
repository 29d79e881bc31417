"""The first design's requests: ``{"customer_id", "request_type", "data": {...}}`` (contract §13).

The design routes by ``request_type`` to its crews ``order_processing``,
``returns_processing`` and ``product_info`` (here aliases of ``order``,
``returns`` and ``product``) and sends other types to a default crew; here
that is the ``support`` router, which reads the request as a message.
"""

from __future__ import annotations

import json
from typing import Any

from agents.builtin import DESIGN_ALIASES as DESIGN_ALIASES  # noqa: PLC0414 - re-exported by agents.crews
from agents.crews.models import DesignRequest, SupportInput
from agents.crews.specialists import run_specialist
from agents.crews.support import support
from streams.errors import Reject

SPECIALIST_FOR_TYPE = {"order": "order", "return": "returns", "returns": "returns", "product": "product"}


def _message(request: DesignRequest) -> str:
    """The request as the free text the support router reads."""
    data = request.data
    text = data.query or data.question
    facts = {k: v for k, v in data.model_dump(exclude_none=True).items() if k not in ("query", "question", "priority")}
    parts = [f"{request.request_type} request"]
    if text:
        parts.append(text)
    if facts:
        parts.append(json.dumps(facts, default=str, sort_keys=True))
    return ": ".join(parts)[:4000]


async def answer_design_request(request: DesignRequest) -> dict[str, Any]:
    """Run the specialist ``request_type`` names, or the support router for any other type."""
    kind = SPECIALIST_FOR_TYPE.get(request.request_type.lower())
    data = request.data
    base = {"customer_id": request.customer_id, "request_type": request.request_type}
    if kind is None:
        routed = await support(SupportInput(query=_message(request), customer_id=request.customer_id))
        return {**base, "routed_by": "support", **routed}
    if kind in ("order", "returns") and data.order_id is None:
        raise Reject(f"request_type {request.request_type!r} needs data.order_id (e.g. ORD-12345)")
    if kind == "product" and data.sku is None and not (data.query or data.question):
        raise Reject(f"request_type {request.request_type!r} needs data.sku or data.query")
    question = data.question or data.query
    if kind == "order":
        inputs = {"order_id": data.order_id or "", "question": question or "What is the status of my order?"}
    elif kind == "returns":
        inputs = {"order_id": data.order_id or "", "item": data.sku or "the whole order", "reason": data.reason or "not given",
                  "question": question or "I would like to return my order."}
    else:
        inputs = {"item": data.sku or "a product", "question": question or "Tell me about this product."}
    answer = await run_specialist(kind, {"customer": request.customer_id, **inputs})
    return {**base, "routed_to": kind, **answer}
