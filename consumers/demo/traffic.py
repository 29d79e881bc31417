"""The Black Friday burst: realistic customer-service requests, VIPs on the high lane, a few bad ones."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

ORDER_QUESTIONS = ["Where is my order?", "When will my package arrive?", "Has my order shipped yet?", "Can I change the delivery address?"]
RETURN_REASONS = ["too small", "arrived damaged", "changed my mind", "wrong colour", "does not work"]
PRODUCT_QUESTIONS = ["Is it in stock?", "Does it come in black?", "What is the warranty?", "Is it waterproof?"]
SUPPORT_MESSAGES = [
    "hi, my order {order} still hasn't arrived, where is it??",
    "I want to return the shoes from order {order}, they are too small",
    "do you have the {product} in stock for christmas?",
    "the {product} I got is broken, I need a refund for {order}",
    "what is your return policy on sale items?",
    "can you tell me if {product} ships to Canada",
]


def product_analysis(product: str) -> dict[str, Any]:
    """The first design's fan-out / fan-in as a workflow: reviews, pricing, inventory -> sentiment -> recommendation."""
    steps: list[dict[str, Any]] = [
        {"id": "reviews", "agent": "product", "data": {"sku": product, "question": "Summarise what customers say about it."}},
        {"id": "pricing", "agent": "product", "data": {"sku": product, "question": "Is the price competitive?"}},
        {"id": "inventory", "agent": "product", "data": {"sku": product, "question": "Is it in stock?"}},
        {"id": "sentiment", "agent": "ask", "data": {"prompt": f"What is the customers' sentiment about {product}?"}, "after": ["reviews"]},
        {"id": "recommend", "agent": "ask", "data": {"prompt": f"Should we promote, discount or restock {product}?"},
         "after": ["pricing", "inventory", "sentiment"]},
    ]
    return {"steps": steps, "on_failure": "fail", "timeout_s": 120}


@dataclass(frozen=True, slots=True)
class Planned:
    """One request the demo will send: through the gateway (``via_gateway``) or the Python API."""

    agent: str
    data: dict[str, Any]
    job_id: str
    priority: str
    via_gateway: bool = False


@dataclass(frozen=True, slots=True)
class Malformed:
    """A raw XADD that must come back ``rejected`` without hurting anyone."""

    fields: dict[str, str]
    job_id: str


def plan(n: int, *, orders: list[str], products: list[str], seed: int = 11) -> tuple[list[Planned], list[Malformed]]:
    """``n`` requests in all: about 1 % malformed, 1 % flaky, 1 % product-analysis workflows, 10 % from VIP customers (high lane)."""
    rng = random.Random(seed)
    good: list[Planned] = []
    bad: list[Malformed] = []
    for i in range(n):
        job_id = f"bf-{i:05d}"
        customer = f"CUST-{rng.randint(1, 400):04d}"
        vip = rng.random() < 0.10
        priority = "high" if vip else ("normal" if rng.random() < 0.8 else "low")
        order, product = rng.choice(orders), rng.choice(products)
        roll = rng.random()
        if i % 100 == 37:
            bad.append(Malformed(rng.choice([
                {"agent": "order", "data": "{not json", "id": job_id},
                {"agent": "gift-wrapper", "data": "{}", "id": job_id},
                {"data": '{"order_id": "ORD-1"}', "id": job_id},
            ]), job_id))
        elif i % 100 == 53:
            good.append(Planned("workflow", product_analysis(product), job_id, priority))
        elif i % 100 == 71:
            good.append(Planned("echo", {"check": "inventory-sync", "fail_first": 1}, job_id, priority))
        elif roll < 0.35:
            good.append(Planned("support", {"query": rng.choice(SUPPORT_MESSAGES).format(order=order, product=product), "customer_id": customer},
                                job_id, priority, via_gateway=True))
        elif roll < 0.6:
            good.append(Planned("order", {"order_id": order, "question": rng.choice(ORDER_QUESTIONS)}, job_id, priority))
        elif roll < 0.8:
            good.append(Planned("returns", {"order_id": order, "reason": rng.choice(RETURN_REASONS)}, job_id, priority))
        else:
            good.append(Planned("product", {"question": rng.choice(PRODUCT_QUESTIONS), "sku": product}, job_id, priority))
    return good, bad
