"""The agent functions the worker calls: validated input in, a crew's answer out.

Each also takes the first design's payload (``DesignRequest``), answered by
:func:`agents.crews.design.answer_design_request`, and its fan-out sub-task data
(``DesignAction``, ``{"action": "analyze_reviews"}``), done by the specialist's action variant, also when it
comes in the payload that design's ``fan_out`` enqueues (``DesignSubTask``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agents.crews.design import answer_design_request
from agents.crews.models import (
    DesignAction,
    DesignRequest,
    DesignSubTask,
    OrderRequest,
    ProductRequest,
    ReturnsRequest,
    SupportInput,
    SupportRequest,
)
from agents.crews.specialists import ACTION, run_specialist
from agents.crews.support import support
from agents.registry import AgentContext

# In a workflow, a crew's task carries the results of the steps it runs after (ctx.inputs), via the question.


async def run_action(kind: str, data: DesignAction, ctx: AgentContext) -> dict[str, Any]:
    """The first design's fan-out sub-task: the specialist's action variant does ``data.action`` (for the product
    when one is named), with the earlier steps' answers."""
    question = f"{data.question} (product {data.sku})" if data.sku else data.question
    return await run_specialist(kind + ACTION, {"question": ctx.with_inputs(question)})


async def run_sub_task(kind: str, data: DesignSubTask, ctx: AgentContext) -> dict[str, Any]:
    """The first design's enqueued sub-task: ``input`` done as an action, with ``results`` as the earlier steps' answers;
    the result names ``parent_id`` and ``sub_task_id``, which that design's fan-in collects by."""
    given = {k: v if isinstance(v, dict) else {"answer": v if isinstance(v, str) else str(v)} for k, v in (data.results or {}).items()}
    sub_ctx = replace(ctx, inputs={**ctx.inputs, **given})
    if kind == "support":
        action = data.input
        question = f"{action.question} (product {action.sku})" if action.sku else action.question
        done = await support(SupportInput(query=sub_ctx.with_inputs(question), customer_id="(not given)"))
    else:
        done = await run_action(kind, data.input, sub_ctx)
    return {"parent_id": data.parent_id, "sub_task_id": data.sub_task_id, **done}


async def order(request: OrderRequest, ctx: AgentContext) -> dict[str, Any]:
    """Order status, shipping and tracking, answered by the order crew."""
    data = request.root
    if isinstance(data, DesignRequest):
        return await answer_design_request(data)
    if isinstance(data, DesignSubTask):
        return await run_sub_task("order", data, ctx)
    if isinstance(data, DesignAction):
        return await run_action("order", data, ctx)
    return await run_specialist("order", {"customer": "(not given)", "order_id": data.order_id, "question": ctx.with_inputs(data.question)})


async def returns(request: ReturnsRequest, ctx: AgentContext) -> dict[str, Any]:
    """Returns and refunds, handled by the returns crew."""
    data = request.root
    if isinstance(data, DesignRequest):
        return await answer_design_request(data)
    if isinstance(data, DesignSubTask):
        return await run_sub_task("returns", data, ctx)
    if isinstance(data, DesignAction):
        return await run_action("returns", data, ctx)
    inputs = {"customer": "(not given)", "order_id": data.order_id, "item": data.sku or "the whole order", "reason": data.reason,
              "question": ctx.with_inputs(data.question)}
    return await run_specialist("returns", inputs)


async def product(request: ProductRequest, ctx: AgentContext) -> dict[str, Any]:
    """Stock, price and product questions, answered by the product crew."""
    data = request.root
    if isinstance(data, DesignRequest):
        return await answer_design_request(data)
    if isinstance(data, DesignSubTask):
        return await run_sub_task("product", data, ctx)
    if isinstance(data, DesignAction):
        return await run_action("product", data, ctx)
    return await run_specialist("product", {"customer": "(not given)", "item": data.sku or "a product", "question": ctx.with_inputs(data.question)})


async def support_desk(request: SupportRequest, ctx: AgentContext) -> dict[str, Any]:
    """Route a customer's message to order, returns or product, and return that crew's answer."""
    data = request.root
    if isinstance(data, DesignRequest):
        return await answer_design_request(data)
    if isinstance(data, DesignSubTask):
        return await run_sub_task("support", data, ctx)
    if isinstance(data, DesignAction):
        return await support(SupportInput(query=ctx.with_inputs(data.question), customer_id="(not given)"))
    return await support(data)
