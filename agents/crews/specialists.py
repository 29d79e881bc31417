"""The three specialist crews: order, returns, product. One agent and one task each.

Crews run with ``akickoff`` on the worker's loop, their sync steps in the pool
``configure_executor`` sized. A crew serves one job at a time and goes back
to a free list afterwards: CrewAI builds an agent's executor (a Flow) on the
first kickoff, ~20 ms of CPU, and only updates it on later ones, which is
the difference between ~15 and ~27 crew jobs/s on two cores. A crew whose
kickoff failed is dropped rather than reused.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from crewai import Agent, Crew, Process, Task
from crewai.utilities.task_output_storage_handler import TaskOutputStorageHandler

from agents.crews.executor import ensure_executor
from agents.crews.llm import StreamcrewLLM
from agents.crews.tools import make_tool
from agents.llm.runtime import get_model


@dataclass(frozen=True, slots=True)
class Specialist:
    role: str
    goal: str
    backstory: str
    tools: tuple[str, ...]
    task: str
    expected_output: str = "A short, friendly reply to the customer that uses the facts the tools returned."


SPECIALISTS: dict[str, Specialist] = {
    "order": Specialist(
        role="Order support specialist",
        goal="Tell customers exactly where their order is and what happens next.",
        backstory="You work in an online outdoor shop's support team and can look up any order.",
        tools=("lookup_order", "check_inventory"),
        task="Customer {customer} asks about order {order_id}: \"{question}\". Look up the order and answer with its status, carrier and tracking number where relevant.",
    ),
    "returns": Specialist(
        role="Returns and refunds specialist",
        goal="Handle return requests fairly and explain the refund clearly.",
        backstory="You apply the shop's return policy and can open returns for delivered orders.",
        tools=("process_return", "search_knowledge_base"),
        task="Customer {customer} wants to return {item} from order {order_id} (reason: {reason}): \"{question}\". Process the return request and explain the outcome and the refund.",
    ),
    "product": Specialist(
        role="Product information specialist",
        goal="Answer product questions with accurate stock, price and policy facts.",
        backstory="You know the catalogue, its stock levels and the shop's FAQ.",
        tools=("check_inventory", "search_knowledge_base"),
        task="Customer {customer} asks about {item}: \"{question}\". Check stock and the knowledge base as needed and answer.",
    ),
}

# The first design's fan-out sub-tasks ({"action": "analyze_reviews"}) name an action, not a customer's request:
# each specialist has a variant, "<kind>:action", whose task is that action, with its role and the tools that need
# no order number (an action names none).
ACTION = ":action"
ORDER_TOOLS = ("lookup_order", "process_return")
for _kind, _spec in list(SPECIALISTS.items()):
    SPECIALISTS[_kind + ACTION] = replace(
        _spec, tools=tuple(t for t in _spec.tools if t not in ORDER_TOOLS), task="As one step of an analysis of the shop's products and orders, do this: \"{question}\". Use your tools "
                    "where they help and answer briefly.",
        expected_output="A short analysis that uses the facts the tools returned.")


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


# CrewAI's executor fills these into its prompt after the task is in it ({input} first: the task itself), so the
# same names in the task would be filled with the tools' descriptions; a WORD JOINER (invisible) keeps them text.
_EXECUTOR_NAMES = {"{tools}": "{\u2060tools}", "{tool_names}": "{\u2060tool_names}"}


def fill_once(template: str, values: Mapping[str, str]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced in one pass; other braces stay as written.

    The values are customers' text. CrewAI fills a template one name after another over the text so far
    (``interpolate_only``), so a customer id of ``{question}`` turned into the question. Here a value is never
    read for placeholders: it reaches the prompt as it was, once.
    """
    return _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), template)


def task_inputs(kind: str, inputs: Mapping[str, str]) -> dict[str, str]:
    """The kickoff inputs of a :func:`build_crew` crew: its one placeholder, ``{task}``, is the whole task, written
    here (CrewAI then has one name to fill, once); the names its executor fills later are kept from it."""
    task = fill_once(SPECIALISTS[kind].task, inputs)
    for name, kept in _EXECUTOR_NAMES.items():
        task = task.replace(name, kept)
    return {"task": task}


def build_crew(kind: str, llm: StreamcrewLLM) -> Crew:
    spec = SPECIALISTS[kind]
    agent = Agent(
        role=spec.role, goal=spec.goal, backstory=spec.backstory, llm=llm,
        tools=[make_tool(name) for name in spec.tools],
        allow_delegation=False, max_iter=4, verbose=False, cache=False,
        max_retry_limit=0,  # the worker retries a job's attempt; CrewAI's own retry ran the task (tools too) 3 times in one
    )
    task = Task(description="{task}", expected_output=spec.expected_output, agent=agent)
    crew = Crew(agents=[agent], tasks=[task], process=Process.sequential, verbose=False, memory=False, cache=False, tracing=False)
    crew._task_output_handler = NoTaskOutputStorage()
    return crew


class NoTaskOutputStorage(TaskOutputStorageHandler):
    """CrewAI's replay log, switched off: it rewrote a SQLite file under a machine-wide lock on every
    kickoff (halving crew throughput) and kept customers' inputs and outputs on disk. The result
    event is our record of the run."""

    def __init__(self) -> None:  # no SQLite storage is opened
        pass

    def update(self, task_index: int, log: dict[str, Any]) -> None:
        pass

    def add(self, task: Any, output: dict[str, Any], task_index: int, inputs: dict[str, Any] | None = None, was_replayed: bool = False) -> None:
        pass

    def reset(self) -> None:
        pass

    def load(self) -> list[dict[str, Any]] | None:
        return None


_free: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], list[tuple[Crew, StreamcrewLLM]]]] = weakref.WeakKeyDictionary()


async def run_specialist(kind: str, inputs: dict[str, str]) -> dict[str, Any]:
    """Kick off one specialist crew; the answer is CrewAI's output, written by the LLM."""
    ensure_executor()
    loop = asyncio.get_running_loop()
    model = get_model()
    free = _free.setdefault(loop, {}).setdefault((kind, id(model)), [])
    if free:
        crew, llm = free.pop()
    else:
        llm = StreamcrewLLM.bound(model, loop)
        crew = build_crew(kind, llm)
    try:
        output = await crew.akickoff(inputs=task_inputs(kind, inputs))
    except BaseException:  # a timeout's cancel stops only this task: the step's thread and its LLM call go on unless aborted
        llm.abort()
        raise
    free.append((crew, llm))
    task_output = output.tasks_output[0] if output.tasks_output else None
    return {
        "agent": kind.removesuffix(ACTION),
        "answer": output.raw,
        "crew": {"agent_role": SPECIALISTS[kind].role, "task": task_output.description if task_output else None},
    }
