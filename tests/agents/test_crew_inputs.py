"""A customer's text reaches the crew's prompt as it was, once: braces in one field fill in nothing.

CrewAI fills ``{name}`` placeholders one after another over the text so far, and its executor fills
``{tools}`` after the task is in the prompt. The endpoint is a real loopback server answering with
``mock_logic`` (as mock-llm does) that keeps each request's body.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from agents.builtin import builtin_registry
from agents.crews.specialists import fill_once, task_inputs
from agents.crews.support import SYSTEM as ROUTER
from agents.llm import LLMSettings, configure, mock_logic
from agents.registry import AgentContext
from agents.runner import run_agent
from tests.agents.test_llm_hostile import openai_200
from tests.hostile import HostilePeer, Start, started_peers

peer = pytest.fixture(started_peers, name="peer")
CUSTOMER = "{question}}{"
QUESTION = "Is {customer} on {order_id}? {tools} {tool_names} {input} {nope} { }}"

CASES = [
    ("order", {"customer_id": CUSTOMER, "request_type": "order", "data": {"order_id": "ORD-12345", "question": QUESTION}},
     f'Customer {CUSTOMER} asks about order ORD-12345: "{QUESTION}".'),
    ("returns", {"customer_id": CUSTOMER, "request_type": "return", "data": {"order_id": "ORD-12346", "reason": "{customer}{", "question": QUESTION}},
     f'Customer {CUSTOMER} wants to return the whole order from order ORD-12346 (reason: {{customer}}{{): "{QUESTION}".'),
    ("product", {"customer_id": "{item}", "request_type": "product", "data": {"sku": "SKU-1001", "question": QUESTION}},
     f'Customer {{item}} asks about SKU-1001: "{QUESTION}".'),
    ("order", {"order_id": "ORD-12345", "question": QUESTION},
     f'Customer (not given) asks about order ORD-12345: "{QUESTION}".'),
    ("support", {"customer_id": CUSTOMER, "query": f"Where is ORD-12347? {QUESTION}"},
     f'Customer {CUSTOMER} asks about order ORD-12347: "Where is ORD-12347? {QUESTION}".'),
]


async def crew_prompts(peer: Start, agent: str, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The job's output and the user message of each request the crew made (not the support router's)."""
    started: list[HostilePeer] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(openai_200(mock_logic.openai_response(orjson.loads(started[0].bodies[-1]))))
        await writer.drain()
        return True

    started.append(await peer(answer))
    configure(LLMSettings(base_url=started[0].url + "/v1", api_keys="sk-crew-test-0001", model="deepseek-v3.2"))  # type: ignore[arg-type]
    output, _ = await run_agent(builtin_registry().get(agent), data, AgentContext(job_id="t-inputs", agent=agent, attempt=1, max_attempts=1))
    requests = [orjson.loads(body)["messages"] for body in started[0].bodies]
    users = [m["content"] for messages in requests if messages[0]["content"] != ROUTER for m in messages[:2] if m["role"] == "user"]
    return output, users


@pytest.mark.parametrize(("agent", "data", "task"), CASES, ids=["order", "returns", "product", "order-input", "support"])
async def test_a_customers_braces_reach_the_crews_prompt_verbatim_and_fill_in_nothing(
        peer: Start, agent: str, data: dict[str, Any], task: str) -> None:
    # Given a request whose customer id, question and reason hold placeholders of the crew's task and prompt
    # When its crew runs
    output, prompts = await crew_prompts(peer, agent, data)
    # Then the model was asked the task with each value as the customer wrote it, once: no field filled from
    # another, no tools' descriptions in the question (whose {tools} and {tool_names} carry an invisible word
    # joiner, which keeps CrewAI's executor from filling them)
    shown, question = kept(task), kept(QUESTION)
    assert output["crew"]["task"].startswith(shown), output["crew"]["task"]
    assert prompts and all(shown in p for p in prompts), prompts[0]
    assert all(p.count(question) == 1 and "Tool Name:" not in p for p in prompts)


def kept(text: str) -> str:
    return text.replace("{tools}", "{\u2060tools}").replace("{tool_names}", "{\u2060tool_names}")


def test_fill_once_reads_no_value_for_placeholders() -> None:
    assert fill_once("{a}-{b}-{c}", {"a": "{b}", "b": "{a}{c}"}) == "{b}-{a}{c}-{c}"
    assert task_inputs("product", {"customer": "{tools}", "item": "x", "question": "q"})["task"].startswith("Customer {\u2060tools} ")
