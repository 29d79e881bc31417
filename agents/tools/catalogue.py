"""The shop data the support tools read, behind a ``Catalogue`` protocol a user replaces.

``JsonCatalogue`` serves the demo data shipped in ``agents/data/catalogue.json``;
a real deployment implements ``Catalogue`` over its own order and product
systems and installs it with ``set_catalogue``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from importlib import resources
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

_WORD = re.compile(r"[a-z0-9]+")


class OrderItem(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    order_id: str
    customer_id: str
    status: str
    carrier: str | None = None
    tracking: str | None = None
    placed_at: dt.date
    delivered_at: dt.date | None = None
    items: list[OrderItem]


class Product(BaseModel):
    sku: str
    name: str
    price_usd: float
    stock: int
    category: str
    description: str


class ReturnPolicy(BaseModel):
    window_days: int
    refund_method: str
    conditions: str
    non_returnable_categories: list[str] = []


class FaqEntry(BaseModel):
    id: str
    question: str
    answer: str


class ReturnDecision(BaseModel):
    order_id: str
    approved: bool
    rma: str | None = None
    reason: str


@runtime_checkable
class Catalogue(Protocol):
    """What the tools need from a shop; every method is sync and fast (tools run in threads)."""

    def get_order(self, order_id: str) -> Order | None: ...

    def get_product(self, sku: str) -> Product | None: ...

    def find_products(self, text: str, limit: int = 3) -> list[Product]: ...

    def return_policy(self) -> ReturnPolicy: ...

    def search_faq(self, text: str, limit: int = 3) -> list[FaqEntry]: ...

    def request_return(self, order_id: str, sku: str | None, reason: str) -> ReturnDecision: ...


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2}


class JsonCatalogue:
    """The demo catalogue: a JSON document with products, orders, a return policy and an FAQ."""

    def __init__(self, data: dict[str, object]) -> None:
        self._orders = {o.order_id: o for o in (Order.model_validate(x) for x in data["orders"])}  # type: ignore[attr-defined]
        self._products = {p.sku: p for p in (Product.model_validate(x) for x in data["products"])}  # type: ignore[attr-defined]
        self._policy = ReturnPolicy.model_validate(data["return_policy"])
        self._faq = [FaqEntry.model_validate(x) for x in data["faq"]]  # type: ignore[attr-defined]
        self._today = dt.date.fromisoformat(str(data.get("today") or dt.date.today().isoformat()))

    @classmethod
    def demo(cls) -> JsonCatalogue:
        text = resources.files("agents").joinpath("data/catalogue.json").read_text(encoding="utf-8")
        return cls(json.loads(text))

    def get_order(self, order_id: str) -> Order | None:
        return self._orders.get(order_id.upper())

    def get_product(self, sku: str) -> Product | None:
        return self._products.get(sku.upper())

    def find_products(self, text: str, limit: int = 3) -> list[Product]:
        words = _words(text)
        scored = [(len(words & _words(p.name + " " + p.category + " " + p.description)), p) for p in self._products.values()]
        return [p for score, p in sorted(scored, key=lambda sp: -sp[0]) if score][:limit]

    def return_policy(self) -> ReturnPolicy:
        return self._policy

    def search_faq(self, text: str, limit: int = 3) -> list[FaqEntry]:
        words = _words(text)
        scored = [(len(words & _words(f.question + " " + f.answer)), f) for f in self._faq]
        return [f for score, f in sorted(scored, key=lambda sf: -sf[0]) if score][:limit]

    def request_return(self, order_id: str, sku: str | None, reason: str) -> ReturnDecision:
        order = self.get_order(order_id)
        if order is None:
            return ReturnDecision(order_id=order_id, approved=False, reason=f"no order {order_id}")
        if sku is not None and sku.upper() not in {i.sku for i in order.items}:
            return ReturnDecision(order_id=order.order_id, approved=False, reason=f"{sku} is not part of order {order.order_id}")
        if order.delivered_at is None:
            return ReturnDecision(order_id=order.order_id, approved=False, reason=f"order is {order.status}, not delivered; cancel or refuse delivery instead")
        age = (self._today - order.delivered_at).days
        if age > self._policy.window_days:
            return ReturnDecision(order_id=order.order_id, approved=False, reason=f"delivered {age} days ago, outside the {self._policy.window_days}-day window")
        rma = "RMA-" + hashlib.sha256(f"{order.order_id}:{sku}".encode()).hexdigest()[:8].upper()
        return ReturnDecision(order_id=order.order_id, approved=True, rma=rma, reason=f"within the {self._policy.window_days}-day window; refund to {self._policy.refund_method}")


_catalogue: Catalogue | None = None


def set_catalogue(catalogue: Catalogue | None) -> None:
    """Install the catalogue the tools use (None: back to the demo data)."""
    global _catalogue
    _catalogue = catalogue


def get_catalogue() -> Catalogue:
    global _catalogue
    if _catalogue is None:
        _catalogue = JsonCatalogue.demo()
    return _catalogue
