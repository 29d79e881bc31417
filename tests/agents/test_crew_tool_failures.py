"""A tool CrewAI has the LLM run itself (``available_functions``) that is unknown or raises: an error the model can read.

CrewAI's own runner returns None for both, which its caller takes for an empty answer. The endpoint is a real
mock-llm on loopback; the LLM is StreamcrewLLM on real CrewAI, called from a crew thread as CrewAI's reasoning step calls it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agents.crews import StreamcrewLLM
from agents.llm import LLMClient, LLMSettings
from consumers.mock_llm import RunningMock

PLAN_TOOL = {"type": "function", "function": {"name": "create_plan", "description": "Create a plan",
                                              "parameters": {"type": "object", "properties": {"plan": {"type": "string"}}}}}
ORDER_TOOL = {"type": "function", "function": {"name": "lookup_order", "description": "Look an order up",
                                               "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}
PASSWORD, TOKEN = "pw-Zk31QpLm", "tk-88AaBbCc"


async def call_with_tools(mock_llm: RunningMock, tools: list[dict[str, Any]], available_functions: dict[str, Any]) -> Any:
    """One ``llm.call`` from a thread, with ``tools`` offered to the model and ``available_functions`` to run them."""
    client = LLMClient(LLMSettings(base_url=mock_llm.openai_base_url, api_keys="sk-tool-test-0001", model="deepseek-v3.2"))  # type: ignore[arg-type]
    llm = StreamcrewLLM.bound(client, asyncio.get_running_loop())
    try:
        return await asyncio.wait_for(asyncio.to_thread(
            llm.call, [{"role": "user", "content": "Make a plan"}], tools=tools, available_functions=available_functions), 30)
    finally:
        await client.aclose()


async def test_a_tool_the_model_names_but_the_caller_cannot_run_is_an_error_naming_the_ones_it_can(mock_llm: RunningMock) -> None:
    # Given a caller that offers the model a tool it has no function for (as a model may also name one it was never offered)
    ran: list[str] = []

    def create_plan(**kwargs: Any) -> str:
        ran.append("create_plan")
        return "planned"

    # When the model calls it
    result = await call_with_tools(mock_llm, [ORDER_TOOL], {"create_plan": create_plan, "summarise": create_plan})
    # Then nothing ran and the call's result says which tools there are (before: None, an "empty answer" to CrewAI)
    assert ran == []
    assert result == "Error: unknown tool 'lookup_order'; available: create_plan, summarise.", result
    assert mock_llm.app is not None and len(mock_llm.app.served) == 1


async def test_a_tool_that_raises_is_an_error_naming_the_exception_without_url_secrets(
    mock_llm: RunningMock, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a tool whose backend refuses it, quoting a URL with credentials and a token
    def create_plan(**kwargs: Any) -> str:
        raise ConnectionError(f"cannot reach http://planner:{PASSWORD}@127.0.0.1:9/plans?token={TOKEN}")

    # When the model calls it
    with caplog.at_level(logging.DEBUG):
        result = await call_with_tools(mock_llm, [PLAN_TOOL], {"create_plan": create_plan})
    # Then the call's result names the tool, the exception and where it failed, without the URL's secrets
    # (before: None, an "empty answer" to CrewAI), and the log keeps none of them either
    assert result == "Error: tool 'create_plan' failed: ConnectionError: cannot reach http://127.0.0.1:9/plans", result
    assert PASSWORD not in caplog.text and TOKEN not in caplog.text, caplog.text


@pytest.mark.parametrize("status", [400, 500])
async def test_a_crew_makes_one_try_of_its_task_per_attempt_when_the_llm_fails(status: int) -> None:
    from agents.crews.specialists import build_crew, task_inputs
    from agents.llm import LLMRequestError, LLMUnavailable
    from tests.hostile import HostilePeer, response

    # Given an LLM endpoint that refuses every call (400: never retried; 500: retried by the client itself, not here)
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(status, b'{"error": {"message": "no"}}', headers="content-type: application/json\r\n"))
        await writer.drain()
        return True

    peer = await HostilePeer(answer).start()
    client = LLMClient(LLMSettings(base_url=peer.url + "/v1", api_keys="sk-crew-test-0001", model="deepseek-v3.2",  # type: ignore[arg-type]
                                   max_retries=0, backoff_s=0.01))
    crew = build_crew("order", StreamcrewLLM.bound(client, asyncio.get_running_loop()))
    try:
        # When the order crew is kicked off once (one attempt of its job)
        with pytest.raises((LLMRequestError, LLMUnavailable)):
            await asyncio.wait_for(crew.akickoff(inputs=task_inputs("order", {"customer": "c-1", "order_id": "ORD-1", "question": "where is it?"})), 60)
    finally:
        await client.aclose()
        await peer.stop()
    # Then the endpoint was asked once: CrewAI's own retry (max_retry_limit, 2 by default) ran the task three times,
    # its tools and LLM calls again, within one attempt the worker then retries itself
    assert peer.requests == 1, f"{peer.requests} LLM requests in one attempt"
