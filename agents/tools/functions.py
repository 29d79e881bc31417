"""The support tools as plain functions over the catalogue, each with a validated input model.

They return short JSON text for the model to read. Not-found is an answer
(``{"found": false, "message": "no order ORD-x"}``), never an exception: a
customer asking about a wrong number should get a reply, not a failed job.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from agents.tools.catalogue import get_catalogue

ORDER_ID = r"^[A-Za-z]{3}-[A-Za-z0-9-]{1,32}$"
SKU = r"^[A-Za-z]{3}-[A-Za-z0-9-]{1,32}$"


class LookupOrderInput(BaseModel):
    order_id: str = Field(pattern=ORDER_ID, description="order number, e.g. ORD-12345")


class CheckInventoryInput(BaseModel):
    sku: str | None = Field(None, pattern=SKU, description="product SKU, e.g. SKU-1001")
    query: str | None = Field(None, max_length=500, description="product name or words, when the SKU is not known")


class ProcessReturnInput(BaseModel):
    order_id: str = Field(pattern=ORDER_ID, description="order number, e.g. ORD-12345")
    sku: str | None = Field(None, pattern=SKU, description="item to return; all items when omitted")
    reason: str = Field("not given", max_length=500, description="why the customer returns it")


class SearchKnowledgeBaseInput(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="the customer's question or key words")


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def lookup_order(args: LookupOrderInput) -> str:
    order = get_catalogue().get_order(args.order_id)
    if order is None:
        return _json({"found": False, "message": f"no order {args.order_id}"})
    return _json({"found": True, **order.model_dump(mode="json")})


def check_inventory(args: CheckInventoryInput) -> str:
    catalogue = get_catalogue()
    if args.sku:
        product = catalogue.get_product(args.sku)
        products = [product] if product else []
    else:
        products = catalogue.find_products(args.query or "")
    if not products:
        return _json({"found": False, "message": f"no product {args.sku or repr(args.query)}"})
    return _json({"found": True, "products": [{**p.model_dump(mode="json"), "in_stock": p.stock > 0} for p in products]})


def process_return(args: ProcessReturnInput) -> str:
    decision = get_catalogue().request_return(args.order_id, args.sku, args.reason)
    return _json(decision.model_dump(mode="json"))


def search_knowledge_base(args: SearchKnowledgeBaseInput) -> str:
    catalogue = get_catalogue()
    entries = catalogue.search_faq(args.query)
    policy = catalogue.return_policy()
    out: dict[str, Any] = {"faq": [e.model_dump() for e in entries]}
    if any(w in args.query.lower() for w in ("return", "refund", "exchange")):
        out["return_policy"] = policy.model_dump()
    if not entries and "return_policy" not in out:
        out["message"] = "nothing in the knowledge base matches"
    return _json(out)
