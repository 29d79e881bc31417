"""The graph checks and the builder, without Redis; how a step's inputs reach an LLM task."""

import orjson
import pytest

from agents.registry import AgentContext
from streams.envelope import JobRequest
from streams.errors import DecodeError
from streams.job_ids import check_job_id
from streams.workflow import Workflow, WorkflowInvalid, parse_workflow


def test_builder_produces_the_contract_shape() -> None:
    wf = Workflow("wf-1", on_failure="continue", timeout_s=30)
    reviews = wf.step("reviews", "product", {"sku": "SKU-1001"})
    wf.step("sentiment", "ask", {"prompt": "?"}, after=[reviews], max_attempts=2)
    assert wf.to_data() == {
        "steps": [{"id": "reviews", "agent": "product", "data": {"sku": "SKU-1001"}},
                  {"id": "sentiment", "agent": "ask", "data": {"prompt": "?"}, "after": ["reviews"], "max_attempts": 2}],
        "on_failure": "continue", "timeout_s": 30,
    }


@pytest.mark.parametrize(("data", "reason"), [
    ({"steps": []}, "no steps"),
    ({"steps": [{"id": "a", "agent": "echo", "after": ["a"]}]}, "step 'a': a step cannot run after itself"),
    ({"steps": [{"id": "a", "agent": "echo", "after": ["c"]}, {"id": "c", "agent": "echo", "after": ["b"]},
                {"id": "b", "agent": "echo", "after": ["a"]}, {"id": "free", "agent": "echo"}]}, "steps 'a', 'b', 'c' form a cycle"),
    ({"steps": [{"id": "x" * 65, "agent": "echo"}]}, "id must match"),
    ({"steps": [{"id": "a\n", "agent": "echo"}, {"id": "a", "agent": "echo"}]}, "id must match"),  # '$' let it through
    ({"steps": [{"id": "a", "agent": "workflow"}]}, "step 'a': a step cannot be a workflow"),
    ({"steps": [{"id": "a", "agent": "echo", "colour": "red"}]}, "step 'a': field 'colour'"),
    ({"steps": [{"agent": "echo"}]}, "step #1: field 'id'"),
    ({"steps": [{"id": "a", "agent": "echo"}], "on_failure": "panic"}, "field 'on_failure'"),
    ({"steps": [{"id": "a", "agent": "echo"}], "timeout_s": 0}, "field 'timeout_s'"),
    # a step's entry is a request: held to a request's bounds here, not rejected only once the step is due
    ({"steps": [{"id": "a", "agent": "echo", "max_attempts": 1001}]}, "step 'a': field 'max_attempts': Input should be less than or equal to 1000"),
    ({"steps": [{"id": "a", "agent": "echo", "timeout_s": 86401}]}, "step 'a': field 'timeout_s': Input should be less than or equal to 86400"),
    ({"steps": [{"id": "a", "agent": "echo", "timeout_s": float("inf")}]}, "step 'a': field 'timeout_s': Input should be a finite number"),
    ({"steps": [{"id": "a", "agent": "echo"}], "priority": 11}, "field 'priority': Input should be less than or equal to 10"),
    ({"steps": [{"id": "a", "agent": "echo"}], "priority": "9"}, "field 'priority': Input should be a valid integer"),
    ({"steps": [{"id": "a", "agent": "echo"}], "priority": True}, "field 'priority'"),
    # a workflow waits in the timeouts set until due: 1e308 read as infinity there, kept for good
    ({"steps": [{"id": "a", "agent": "echo"}], "timeout_s": 1e308}, "field 'timeout_s': Input should be less than or equal to 2592000"),
    ({"steps": [{"id": "a", "agent": "echo"}], "timeout_s": True}, "field 'timeout_s'"),  # JSON's true was 1 s
    ({"steps": [{"id": "a", "agent": "echo", "max_attempts": True}]}, "step 'a': field 'max_attempts'"),
    ({"steps": [{"id": "a", "agent": "echo", "timeout_s": True}]}, "step 'a': field 'timeout_s'"),
])
def test_each_graph_problem_is_named(data: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(WorkflowInvalid, match=None) as caught:
        parse_workflow(data)
    assert reason in str(caught.value)


def test_a_priority_0_to_10_is_part_of_a_workflow() -> None:
    assert parse_workflow({"steps": [{"id": "a", "agent": "echo"}], "priority": 0}).priority == 0
    assert parse_workflow({"steps": [{"id": "a", "agent": "echo"}], "priority": 10}).priority == 10


def test_inputs_reach_the_task_text() -> None:
    ctx = AgentContext(job_id="wf::b", agent="ask", attempt=1, max_attempts=3, parent="wf", step="b",
                       inputs={"a": {"answer": "reviews are glowing"}, "n": {"count": 3}})
    text = ctx.with_inputs("Recommend?")
    assert text.startswith("Recommend?") and "- a: reviews are glowing" in text and '- n: {"count": 3}' in text
    assert AgentContext(job_id="j", agent="ask", attempt=1, max_attempts=1).with_inputs("Q") == "Q"


def test_a_job_id_with_a_final_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="job id must be"):
        check_job_id("wf\n")  # re.match's '$' matched before it


def test_after_one_step_id_as_a_string_is_that_step() -> None:
    # Given steps a, b and ab, and steps after "ab" (a string, as step() returns it) and after ["a", "b"]
    wf = Workflow("wf-after")
    wf.step("a", "echo")
    wf.step("b", "echo")
    ab = wf.step("ab", "echo")
    wf.step("s", "echo", after=ab)
    wf.step("t", "echo", after=["a", "b"])
    # Then the string names one step (before: its characters, steps a and b), the list each of its own
    steps = {s["id"]: s.get("after") for s in wf.to_data()["steps"]}
    assert steps["s"] == ["ab"] and steps["t"] == ["a", "b"]


@pytest.mark.parametrize("fields", [{"timeout_s": "1"}, {"max_attempts": "2"}, {"timeout_s": "1", "max_attempts": "2"}])
def test_a_workflow_request_with_its_own_attempts_or_time_limit_is_refused_clearly(fields: dict[str, str]) -> None:
    # Given a workflow request (a raw XADD's fields, as a worker reads them) with a request-level limit, taken and then
    # never applied before
    data = {"steps": [{"id": "a", "agent": "echo", "data": {}}]}
    with pytest.raises(DecodeError) as refused:
        JobRequest.from_fields({"agent": "workflow", "id": "wf-limits", "data": orjson.dumps(data).decode(), **fields})
    # Then it is refused, naming each and where the limits go
    for name in fields:
        assert name in str(refused.value)
    assert "data.timeout_s" in str(refused.value) and "each step's timeout_s and max_attempts" in str(refused.value)
    # And a job of another agent takes them, as does a workflow without them
    assert JobRequest.from_fields({"agent": "echo", "data": "{}", **fields}).agent == "echo"
    assert JobRequest.from_fields({"agent": "workflow", "data": orjson.dumps(data).decode()}).agent == "workflow"
