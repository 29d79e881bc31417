"""A priority 0-10 inside a request's data picks the lane when the producer was given none (contract §13)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from streams.envelope import JobRequest, data_priority_problem, lane_for_request, priority_in_data
from streams.keys import Keys
from streams.records import get_job


@pytest.mark.parametrize(("data", "priority"), [
    ({"priority": 8}, 8),
    ({"customer_id": "CUST-002", "request_type": "return", "data": {"order_id": "ORD-67890", "priority": 8}}, 8),
    ({"priority": 2, "data": {"priority": 9}}, 2),  # the top level first
    ({"priority": "urgent", "data": {"priority": 9}}, 9),  # not a priority: the nested one counts
    ({"priority": 11}, None),
    ({"priority": True}, None),
    ({"priority": 7.5}, None),
    ({"data": "not an object"}, None),
    ({}, None),
])
def test_priority_in_data(data: dict[str, Any], priority: int | None) -> None:
    assert priority_in_data(data) == priority


@pytest.mark.parametrize(("data", "problem"), [
    ({"priority": 8}, None),
    ({"priority": 2, "data": {"priority": 99}}, None),  # the top level picks the lane: the nested one is the agent's
    ({"priority": "urgent", "data": {"priority": 9}}, None),
    ({"priority": True}, None),  # a flag, not a number
    ({"priority": 11}, "data.priority must be an integer 0-10, got 11"),
    ({"priority": 7.5}, "data.priority must be an integer 0-10, got 7.5"),
    ({"priority": "urgent", "data": {"priority": -3}}, "data.data.priority must be an integer 0-10, got -3"),
    ({"data": "not an object"}, None),
])
def test_data_priority_problem(data: dict[str, Any], problem: str | None) -> None:
    # What `submit` refuses (a number that cannot pick the lane), where priority_in_data says "no priority"
    assert data_priority_problem(data) == problem


def test_an_explicit_priority_wins() -> None:
    assert lane_for_request(None, {"data": {"priority": 8}}) == "high"
    assert lane_for_request("low", {"data": {"priority": 8}}) == "low"
    assert lane_for_request(5, {"priority": 0}) == "normal"
    assert lane_for_request(None, {}) == "normal"


def _submitted(lane: str) -> float:
    return REGISTRY.get_sample_value("streamcrew_jobs_submitted_total", {"lane": lane}) or 0.0


async def test_producer_lanes_by_data_and_counts_new_jobs(redis, keys: Keys, producer) -> None:
    before = {lane: _submitted(lane) for lane in ("high", "normal", "low")}
    # Given the first design's three payloads, published without a priority
    design = {
        "d-order": {"customer_id": "CUST-001", "request_type": "order", "data": {"order_id": "ORD-12345", "priority": 5}},
        "d-return": {"customer_id": "CUST-002", "request_type": "return", "data": {"order_id": "ORD-67890", "reason": "Defective", "priority": 8}},
        "d-product": {"customer_id": "CUST-003", "request_type": "product", "data": {"sku": "SKU-001", "query": "specifications", "priority": 3}},
    }
    published = {job_id: await producer.publish("order_processing", data, id=job_id) for job_id, data in design.items()}
    # And a mixed batch, and one with an explicit priority
    batch = await producer.publish_many([
        JobRequest(agent="echo", data={"priority": 9}, id="b-high"),
        JobRequest(agent="echo", data={}, id="b-normal"),
        JobRequest(agent="echo", data={"priority": 1}, id="b-low"),
        JobRequest(agent="echo", data={"priority": 10}, id="b-high-2"),
    ])
    explicit = await producer.publish("echo", {"priority": 9}, id="explicit", priority="low")
    again = await producer.publish("order_processing", design["d-return"], id="d-return")  # a repeated id is no new job

    # Then each went to the lane its priority names, in the batch's order, and its record says so
    assert {k: p.lane for k, p in published.items()} == {"d-order": "normal", "d-return": "high", "d-product": "low"}
    assert [(p.job_id, p.lane) for p in batch] == [("b-high", "high"), ("b-normal", "normal"), ("b-low", "low"), ("b-high-2", "high")]
    assert explicit.lane == "low" and not again.created
    for job_id, lane in [("d-return", "high"), ("b-low", "low"), ("explicit", "low")]:
        record = await get_job(redis, keys, job_id)
        assert record is not None and record.lane == lane
    assert [f["id"] for _, f in await redis.xrange(keys.lane("high"))] == ["d-return", "b-high", "b-high-2"]
    # And the submission counter counts new jobs per lane
    assert {lane: _submitted(lane) - before[lane] for lane in before} == {"high": 3, "normal": 2, "low": 3}


@pytest.mark.parametrize("priority", [True, False, 7.5, 3.0, [8]])
async def test_an_explicit_priority_of_another_type_is_refused_not_read_as_a_lane(redis, keys: Keys, producer, priority: Any) -> None:
    # Given a Python API caller passing a priority that is neither a lane name nor an integer 0-10
    # (True was read as 1: "low"; 7.5 as "high")
    with pytest.raises(ValueError, match="0-10"):
        await producer.publish("echo", {}, id="typed", priority=priority)
    # Then nothing was queued
    assert [await redis.xlen(keys.lane(lane)) for lane in ("high", "normal", "low")] == [0, 0, 0]
