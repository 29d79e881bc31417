"""A model's tool call with arguments that are not a JSON object: an error for the model, never a failed attempt.

The endpoint is a real loopback server answering with ``mock_logic`` (as mock-llm does), except that the
tool calls it chooses carry broken arguments.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agents.builtin import builtin_registry
from agents.crews import StreamcrewLLM
from agents.llm import LLMSettings, LLMUnavailable, configure, mock_logic
from agents.registry import AgentContext
from agents.runner import run_agent
from tests.agents.test_llm_hostile import client_for, openai_200
from tests.hostile import HostilePeer, Start, started_peers

peer = pytest.fixture(started_peers, name="peer")
PLAN_TOOL = {"type": "function", "function": {"name": "create_plan", "description": "Create a plan",
                                              "parameters": {"type": "object", "properties": {"plan": {"type": "string"}}}}}


async def breaking_tool_calls(peer: Start, arguments: str, *, first_only: bool) -> HostilePeer:
    """A loopback endpoint answering as mock-llm does, with ``arguments`` in its tool calls (the first answer's only)."""
    started: list[HostilePeer] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        body = mock_logic.openai_response(orjson.loads(started[0].bodies[-1]))
        for call in body["choices"][0]["message"].get("tool_calls") or []:
            if n == 1 or not first_only:
                call["function"]["arguments"] = arguments
        writer.write(openai_200(body))
        await writer.drain()
        return True

    started.append(await peer(answer))
    return started[0]


DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000  # a JSON string of arguments nested 100,000 deep: RecursionError in json.loads


@pytest.mark.parametrize("arguments", ['{"order_id": "ORD-12345"', DEEP], ids=["cut-short", "nested-100000-deep"])
async def test_a_crew_step_whose_tool_arguments_are_broken_hands_the_model_the_error(peer: Start, arguments: str) -> None:
    # Given an endpoint whose first tool call has arguments cut short, or nested deeper than Python's json reads (the step
    # failed with RecursionError: CrewAI's executor catches JSONDecodeError only)
    p = await breaking_tool_calls(peer, arguments, first_only=True)
    configure(LLMSettings(base_url=p.url + "/v1", api_keys="sk-crew-test-0001", model="deepseek-v3.2"))  # type: ignore[arg-type]
    # When the order crew runs
    output, usage = await run_agent(builtin_registry().get("order"), {"order_id": "ORD-12345"},
                                    AgentContext(job_id="t-args", agent="order", attempt=1, max_attempts=3))
    # Then the attempt succeeded, and the model's next request carried the parse error as the tool's result
    assert output["agent"] == "order" and usage is not None
    assert p.requests == 2
    last = orjson.loads(p.bodies[1])["messages"][-1]
    assert last["role"] == "tool" and "Failed to parse tool arguments as JSON" in last["content"], last


@pytest.mark.parametrize(("arguments", "says"), [
    ('{"plan": "walk the dog', "are not valid JSON (Unterminated string"),
    ('["walk", "the", "dog"]', "are not a JSON object"),
    ("null", "are not a JSON object"),
    (DEEP, "are not valid JSON"),
], ids=["cut-short", "a-list", "null", "nested-100000-deep"])
async def test_a_tool_the_llm_runs_itself_is_not_run_on_broken_arguments_and_the_error_is_its_result(
    peer: Start, arguments: str, says: str,
) -> None:
    # Given an endpoint whose tool calls carry broken arguments, and a caller (CrewAI's reasoning step) that
    # has the LLM run the tool itself, from a crew thread
    p = await breaking_tool_calls(peer, arguments, first_only=False)
    client = client_for(p.url)
    llm = StreamcrewLLM.bound(client, asyncio.get_running_loop())
    ran: list[dict[str, Any]] = []

    def create_plan(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "planned"

    try:
        # When the call is made
        result = await asyncio.wait_for(asyncio.to_thread(
            llm.call, [{"role": "user", "content": "Make a plan"}], tools=[PLAN_TOOL], available_functions={"create_plan": create_plan}), 30)
    finally:
        await client.aclose()
    # Then the tool did not run, the call's result is an error the model can act on, and one request was paid
    assert ran == []
    assert isinstance(result, str) and result.startswith("Error: the arguments of the 'create_plan' tool call ") and says in result, result
    assert p.requests == 1


def test_arguments_nested_deeper_than_python_reads_are_an_error_for_the_model() -> None:
    # Given arguments that reach the LLM's own tool runner nested deeper than Python's json reads (RecursionError)
    from agents.crews.llm import _tool_arguments

    # Then they are an error the model can act on, not an exception failing the step
    result = _tool_arguments("create_plan", DEEP)
    assert isinstance(result, str) and result.startswith("Error: the arguments of the 'create_plan' tool call are nested too deep"), result


async def test_a_crew_whose_model_always_calls_a_tool_fails_saying_so_on_the_round_that_offers_none(peer: Start) -> None:
    # Given an endpoint whose model always answers with a tool call: the first tool offered, or one of its own when
    # CrewAI's last round (max_iter) offers none
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        tools = orjson.loads(started[0].bodies[-1]).get("tools") or []
        name = tools[0]["function"]["name"] if tools else "no_tools_offered"
        call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": '{"order_id": "ORD-12345"}'}}
        writer.write(openai_200({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]},
                                              "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}))
        await writer.drain()
        return True

    started = [await peer(answer)]
    configure(LLMSettings(base_url=started[0].url + "/v1", api_keys="sk-crew-test-0001", model="deepseek-v3.2",  # type: ignore[arg-type]
                          max_retries=1, backoff_s=0.01))
    # When the order crew runs
    with pytest.raises(LLMUnavailable) as caught:
        await run_agent(builtin_registry().get("order"), {"order_id": "ORD-12345"},
                        AgentContext(job_id="t-unoffered", agent="order", attempt=1, max_attempts=1))
    # Then its attempt fails saying what the model did (before: CrewAI's "TaskOutput raw Input should be a valid string"),
    # after the round without tools was tried twice
    assert "the model answered with a tool call when none was offered" in str(caught.value), caught.value
    assert orjson.loads(started[0].bodies[-1]).get("tools") is None and orjson.loads(started[0].bodies[-2]).get("tools") is None
