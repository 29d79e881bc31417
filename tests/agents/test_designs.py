"""The first design's agent names and payloads, answered by the crews about real catalogue records (contract §13)."""

from __future__ import annotations

from typing import Any

import pytest

from agents.builtin import builtin_registry
from agents.registry import AgentContext
from agents.runner import run_agent
from agents.tools.catalogue import JsonCatalogue
from streams.envelope import lane_for_request
from streams.errors import Reject

REGISTRY = builtin_registry()

# The first design's three requests, verbatim: (agent, payload, facts the answer must quote)
DESIGN = [
    ("order_processing", {"customer_id": "CUST-001", "request_type": "order", "data": {"order_id": "ORD-12345", "priority": 5}},
     ("FedEx", "771234567890", "shipped")),
    ("returns_processing", {"customer_id": "CUST-002", "request_type": "return", "data": {"order_id": "ORD-67890", "reason": "Defective", "priority": 8}},
     ('"approved":true', "RMA-")),
    ("product_info", {"customer_id": "CUST-003", "request_type": "product", "data": {"sku": "SKU-001", "query": "specifications", "priority": 3}},
     ("SKU-001", "Specifications:", '"stock":150')),
]


def ctx(agent: str) -> AgentContext:
    return AgentContext(job_id=f"test-{agent}", agent=agent, attempt=1, max_attempts=1)


async def run(agent: str, data: dict[str, Any]) -> dict[str, Any]:
    output, _ = await run_agent(REGISTRY.get(agent), data, ctx(agent))
    assert isinstance(output, dict)
    return output


def test_the_designs_names_are_aliases_of_the_crews() -> None:
    for alias, crew in [("order_processing", "order"), ("returns_processing", "returns"), ("product_info", "product")]:
        assert REGISTRY.get(alias) is REGISTRY.get(crew)
    assert REGISTRY.subset(["order"]).names() == ["order", "order_processing"]


def test_the_demo_catalogue_knows_the_designs_records() -> None:
    catalogue = JsonCatalogue.demo()
    for order_id in ("ORD-12345", "ORD-67890"):
        assert catalogue.get_order(order_id) is not None
    stock = {sku: catalogue.get_product(sku).stock for sku in ("SKU-001", "SKU-002", "SKU-003")}  # type: ignore[union-attr]
    assert stock == {"SKU-001": 150, "SKU-002": 0, "SKU-003": 45}  # the design's check_inventory figures
    assert catalogue.get_order("ORD-12345").carrier == "FedEx"  # type: ignore[union-attr]
    assert catalogue.request_return("ORD-67890", None, "Defective").approved


@pytest.mark.parametrize(("agent", "payload", "facts"), DESIGN, ids=[d[0] for d in DESIGN])
async def test_the_designs_payloads_complete_with_real_records(agent: str, payload: dict[str, Any], facts: tuple[str, ...]) -> None:
    output = await run(agent, payload)
    assert output["customer_id"] == payload["customer_id"] and output["request_type"] == payload["request_type"]
    for fact in facts:
        assert fact in output["answer"], (fact, output["answer"])
    assert payload["customer_id"] in output["crew"]["task"]  # the crew knows whom it answers


async def test_an_unknown_request_type_goes_to_the_support_router() -> None:
    output = await run("order_processing", {"customer_id": "CUST-004", "request_type": "billing",
                                            "data": {"query": "I was charged twice for ORD-12345", "priority": 2}})
    assert output["routed_by"] == "support" and output["routed_to"] == "order" and output["request_type"] == "billing"
    assert "771234567890" in output["answer"]


async def test_support_and_the_crews_take_both_shapes() -> None:
    via_support = await run("support", {"customer_id": "CUST-003", "request_type": "product", "data": {"sku": "SKU-002"}})
    assert via_support["routed_to"] == "product" and '"stock":0' in via_support["answer"]
    own = await run("order", {"order_id": "ORD-12345", "priority": 8})
    assert "FedEx" in own["answer"]


async def test_a_priority_at_the_top_of_the_designs_payload_is_accepted() -> None:
    # The producers pick the lane from data.priority before data.data.priority (contract §13): the crew that
    # then runs the request must not reject the field the lane came from, as it did ("Extra inputs are not permitted")
    payload = {"customer_id": "CUST-001", "request_type": "order", "priority": 9, "data": {"order_id": "ORD-12345"}}
    assert lane_for_request(None, payload) == "high"
    output = await run("order_processing", payload)
    assert "FedEx" in output["answer"] and output["customer_id"] == "CUST-001"
    with pytest.raises(Reject, match="priority"):
        await run_agent(REGISTRY.get("order"), {**payload, "priority": 11}, ctx("order"))


@pytest.mark.parametrize(("agent", "data", "message"), [
    ("order_processing", {"customer_id": "C1", "request_type": "order", "data": {"priority": 5}}, "needs data.order_id"),
    ("returns_processing", {"customer_id": "C1", "request_type": "return", "data": {}}, "needs data.order_id"),
    ("product_info", {"customer_id": "C1", "request_type": "product", "data": {}}, "needs data.sku or data.query"),
    ("order_processing", {"customer_id": "C1", "request_type": "order", "data": {"order_id": "ORD-1", "priority": 11}}, "data.priority"),
    ("order_processing", {"customer_id": "C1", "request_type": "order", "data": {"order_id": "12345"}}, "data.order_id"),
    ("order_processing", {"request_type": "order", "data": {"order_id": "ORD-1"}}, "customer_id"),
    ("order_processing", {"customer_id": "C1", "request_type": "order", "data": {}, "extra": 1}, "extra"),
    ("order", {"order_id": "ORD-1", "priority": "high"}, "priority"),
    ("order", {"order_id": "ORD-1", "query": "where?"}, "query"),
])
async def test_bad_design_payloads_are_rejected_with_the_reason(agent: str, data: dict[str, Any], message: str) -> None:
    with pytest.raises(Reject, match=message.replace(".", r"\.")):
        await run_agent(REGISTRY.get(agent), data, ctx(agent))


# The first design's fan_out enqueues each sub-task as {"parent_id", "sub_task_id", "input": {"action": ...}}, a dependent one
# with "dependencies" and (once they are met) "results" {sub_task_id: result}: the payload its workers dequeue, published as it is
PARENT = "6f848183-41ed-4296-abe7-6700b5d76036"


async def test_the_designs_fan_out_sub_task_payloads_are_done() -> None:
    first = await run("product_info", {"parent_id": PARENT, "sub_task_id": f"{PARENT}-reviews", "input": {"action": "analyze_reviews"}})
    assert (first["parent_id"], first["sub_task_id"]) == (PARENT, f"{PARENT}-reviews") and first["answer"]
    assert "Analyze reviews." in first["crew"]["task"]
    dependent = await run("returns_processing", {
        "parent_id": PARENT, "sub_task_id": f"{PARENT}-sentiment", "input": {"action": "sentiment_analysis"},
        "dependencies": [f"{PARENT}-reviews"], "results": {f"{PARENT}-reviews": first, f"{PARENT}-pricing": "Priced 5% under the market"},
    })
    assert dependent["sub_task_id"] == f"{PARENT}-sentiment" and "Sentiment analysis." in dependent["crew"]["task"]
    task = dependent["crew"]["task"]
    assert f"- {PARENT}-reviews: {first['answer'][:40]}" in task and f"- {PARENT}-pricing: Priced 5% under the market" in task
    # A dependent whose results are not given yet (the design's other branch) is done on its own
    alone = await run("order_processing", {"parent_id": PARENT, "sub_task_id": f"{PARENT}-recommendation", "priority": 5,
                                           "input": {"action": "generate_recommendation"}, "dependencies": [f"{PARENT}-pricing"]})
    assert "Generate recommendation." in alone["crew"]["task"] and "earlier steps" not in alone["crew"]["task"]
    routed = await run("support", {"parent_id": PARENT, "sub_task_id": f"{PARENT}-support", "input": {"action": "check_inventory", "sku": "SKU-001"}})
    assert routed["sub_task_id"] == f"{PARENT}-support" and routed["answer"]


@pytest.mark.parametrize(("data", "message"), [
    ({"parent_id": PARENT, "sub_task_id": "s1", "input": {}}, "input.action"),
    ({"parent_id": PARENT, "sub_task_id": "s1", "input": {"action": "x", "extra": 1}}, "input.extra"),
    ({"sub_task_id": "s1", "input": {"action": "analyze_reviews"}}, "parent_id"),
    ({"parent_id": PARENT, "sub_task_id": "s1", "input": {"action": "analyze_reviews"}, "results": []}, "results"),
])
async def test_bad_sub_task_payloads_are_rejected_with_the_reason(data: dict[str, Any], message: str) -> None:
    with pytest.raises(Reject, match=message.replace(".", r"\.")):
        await run_agent(REGISTRY.get("product_info"), data, ctx("product_info"))
