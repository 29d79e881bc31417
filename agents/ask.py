"""``ask``: one chat completion through the configured LLM (benchmarks and simple prompts)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.llm.runtime import get_model
from agents.registry import AgentContext, AgentRegistry


class AskInput(BaseModel):
    """One prompt, with an optional system message."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"prompt": "In one sentence, what is a Redis stream?"}]})

    prompt: str = Field(min_length=1, max_length=100_000, description="the user message sent to the model")
    system: str | None = Field(None, max_length=20_000, description="a system message sent before the prompt")
    # Contract §13: a priority in `data` picks the lane when the producer was given none; the crews take it too. Refused
    # as an unknown field, it ended a job a producer had just queued by it `rejected`.
    priority: int | None = Field(None, ge=0, le=10, strict=True, description="0-10; chooses the lane when the producer was given none")


async def ask(data: AskInput, ctx: AgentContext) -> dict[str, Any]:
    """Answer ``prompt`` (with an optional ``system`` message) with one LLM call.

    As a workflow step, the prompt also carries its dependencies' results (``ctx.inputs``).
    """
    messages = [{"role": "system", "content": data.system}] if data.system else []
    messages.append({"role": "user", "content": ctx.with_inputs(data.prompt)})
    result = await get_model().chat(messages)
    return {"answer": result.content, "model": result.model}


def register_ask(registry: AgentRegistry) -> None:
    registry.add(ask, name="ask", input_model=AskInput)
