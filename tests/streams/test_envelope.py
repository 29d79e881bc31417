"""Decoding requests: every malformed shape is a DecodeError that names the problem and keeps the raw fields."""

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from streams.envelope import JobRequest, JobResult, Status, lane_for_priority
from streams.errors import DecodeError
from streams.strict_json import encode_data


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"data": "{}"}, "missing field 'agent'"),
        ({"agent": "echo"}, "missing field 'data'"),
        ({"agent": "echo", "data": "{not json"}, "not JSON"),
        ({"agent": "echo", "data": "[1, 2]"}, "must be a JSON object"),
        ({"agent": "echo", "data": "{}", "max_attempts": "0"}, "max_attempts"),
        ({"agent": "echo", "data": "{}", "max_attempts": "2.5"}, "max_attempts"),
        ({"agent": "echo", "data": "{}", "timeout_s": "soon"}, "timeout_s"),
        ({"agent": "echo", "data": "{}", "deadline": "tomorrow"}, "deadline"),
    ],
)
def test_malformed_requests_name_their_problem(raw: dict[str, str], reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        JobRequest.from_fields(raw)
    assert reason in caught.value.reason
    assert caught.value.raw == raw


def test_oversized_request_is_refused() -> None:
    raw = {"agent": "echo", "data": '{"x": "' + "a" * 2000 + '"}'}
    with pytest.raises(DecodeError, match="over the 1000-byte limit"):
        JobRequest.from_fields(raw, max_bytes=1000)


def test_a_steps_inputs_are_held_to_their_own_limit_not_the_requests() -> None:
    # Given a workflow step whose inputs (its dependencies' results) are 1,499 bytes and whose own fields are small
    inputs = '{"a": "' + "a" * 1490 + '"}'
    step = {"agent": "echo", "data": "{}", "id": "wf::b", "parent": "wf", "step": "b", "inputs": inputs}
    # Then a request limit of 1,000 bytes does not count them when the inputs have their own limit
    assert JobRequest.from_fields(step, max_bytes=1000, max_inputs_bytes=2000).inputs == {"a": "a" * 1490}
    with pytest.raises(DecodeError, match=r"field 'inputs' is 1499 bytes, over STREAMCREW_MAX_RESULT_BYTES \(1498\)"):
        JobRequest.from_fields(step, max_bytes=1000, max_inputs_bytes=1498)
    # And inputs on a request that is no step (a raw XADD) count toward the request's size, as every field does
    for not_a_step in ({k: v for k, v in step.items() if k not in ("id", "parent", "step")},
                       {k: v for k, v in step.items() if k not in ("id", "step")},  # a 'parent' field alone is no step
                       {**step, "id": "other"}):  # nor one whose id is not its workflow's step id
        with pytest.raises(DecodeError, match="over the 1000-byte limit"):
            JobRequest.from_fields(not_a_step, max_bytes=1000, max_inputs_bytes=2000)


def test_request_round_trips_through_fields() -> None:
    request = JobRequest(agent="order", data={"order_id": "ORD-1"}, id="j1", max_attempts=2, tenant="acme")
    assert JobRequest.from_fields(request.to_fields()) == request


def test_result_fields_parse_back_with_json_payloads() -> None:
    result = JobResult(id="j", agent="echo", status=Status.COMPLETED, result={"a": [1]}, attempts=1,
                       usage={"model": "m", "prompt_tokens": 1, "completion_tokens": 2, "cost_usd": 0.1})
    back = JobResult.from_fields(result.to_fields())
    assert back.result == {"a": [1]}
    assert back.usage == result.usage


@pytest.mark.parametrize(("priority", "lane"), [(10, "high"), (7, "high"), (6, "normal"), (4, "normal"), (3, "low"), (0, "low"), ("low", "low"), (None, "normal")])
def test_priority_maps_to_lanes(priority: int | str | None, lane: str) -> None:
    assert lane_for_priority(priority) == lane


def test_priority_out_of_range_is_an_error() -> None:
    with pytest.raises(ValueError, match="0-10"):
        lane_for_priority(11)


@pytest.mark.parametrize(("data", "wide"), [
    ('{"n": ' + "9" * 5000 + "}", True),  # past the 4,300 digits int() converts (a ValueError before; orjson, read
    # first where a request is, refuses it as infinity: this is the check's own guard)
    ('{"n": -9223372036854775808, "m": 18446744073709551615}', False),  # the ends of the 64-bit ranges
    ('{"n": 18446744073709551616}', True),
    ('{"s": "' + "9" * 5000 + '"}', False),  # digits in a string are text
])
def test_a_wide_integer_is_told_at_any_length(data: str, wide: bool) -> None:
    from streams.strict_json import has_wide_integer

    assert has_wide_integer(data) is wide
    raw = {"agent": "echo", "data": data}
    if wide:
        with pytest.raises(DecodeError, match="beyond 64 bits|infinity"):
            JobRequest.from_fields(raw)
    else:
        JobRequest.from_fields(raw)


def test_a_stored_json_past_the_shown_depth_reads_as_its_text() -> None:
    from streams.strict_json import MAX_SHOWN_DEPTH, json_bytes, parsed_json

    # Given stored texts: at the depth still shown, one level past it, wide but shallow, and no JSON at all
    at, past = "[" * MAX_SHOWN_DEPTH + "]" * MAX_SHOWN_DEPTH, "[" * (MAX_SHOWN_DEPTH + 1) + "]" * (MAX_SHOWN_DEPTH + 1)
    wide = "[" + ",".join(["{}"] * 2000) + "]"
    # Then only the one past the depth, and the one no JSON, read as text; the deepest parsed one is written back
    assert json_bytes(parsed_json(at)) == at.encode()
    assert parsed_json(past) == past and parsed_json("not json") == "not json"
    assert parsed_json(wide) == [{}] * 2000


@pytest.mark.parametrize("data, refused", [
    ({"a": [0] * 1000 + [None]}, False),  # a null orjson wrote for None: asked, and let through
    ({"a": [[], {"b": [None, 1.5]}]}, False),
    ({"a": [0, None, float("nan")]}, True),
    ({"deep": [[[[{"x": float("inf")}]]]], "n": None}, True),
    ({"x": -float("inf")}, True),
    ({"when": datetime(2026, 12, 7, tzinfo=UTC), "n": None}, False),  # orjson writes datetimes, the stdlib does not: walked
    ({"when": datetime(2026, 12, 7, tzinfo=UTC), "n": float("nan")}, True),
])
def test_data_with_nan_or_infinity_is_refused_and_a_null_is_not(data: dict[str, Any], refused: bool) -> None:
    if refused:
        with pytest.raises(ValueError, match="NaN or Infinity"):
            encode_data(data)
    else:
        assert orjson.loads(encode_data(data)) == orjson.loads(orjson.dumps(data))
