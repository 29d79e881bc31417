"""Input models of the support agents; invalid input ends the job ``rejected``.

Each crew takes its own shape, the first design's ``{"customer_id", "request_type", "data"}``
(contract §13), that design's fan-out sub-task data ``{"action": "analyze_reviews"}``, or the
sub-task payload its ``fan_out`` enqueues, ``{"parent_id", "sub_task_id", "input": {"action": ...}}``;
``*Request`` picks the model by the presence of ``request_type``, then ``sub_task_id``, then ``action``.

Each model's ``examples`` is the request docs/agents.md shows (and runs, on the offline model).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from agents.tools.functions import ORDER_ID, SKU



def _priority() -> Any:
    """A producer given no priority picks the lane by this one (contract §13); the crews only check it."""
    return Field(None, ge=0, le=10, strict=True, description="0-10; chooses the lane when the producer was given none")


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class OrderInput(_Input):
    """A question about one order."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"order_id": "ORD-12345", "question": "Where is my parcel?"}]})

    order_id: str = Field(pattern=ORDER_ID, description="order number, e.g. ORD-12345")
    question: str = Field("What is the status of my order?", min_length=1, max_length=2000, description="the customer's question, free text")
    priority: int | None = _priority()


class ReturnsInput(_Input):
    """A request to return an order, or one item of it."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"order_id": "ORD-12346", "sku": "SKU-1004", "reason": "too small"}]})

    order_id: str = Field(pattern=ORDER_ID, description="order number, e.g. ORD-12346")
    sku: str | None = Field(None, pattern=SKU, description="the item to return; the whole order when omitted")
    reason: str = Field("not given", max_length=500, description="why the customer returns it")
    question: str = Field("I would like to return my order.", min_length=1, max_length=2000, description="the customer's request, free text")
    priority: int | None = _priority()


class ProductInput(_Input):
    """A question about the catalogue: stock, price, sizes, warranty."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"question": "Is it in stock, and what does it cost?", "sku": "SKU-1001"}]})

    question: str = Field(min_length=1, max_length=2000, description="the customer's question, free text")
    sku: str | None = Field(None, pattern=SKU, description="the product asked about, e.g. SKU-1001, if known")
    priority: int | None = _priority()


class SupportInput(_Input):
    """A free-text customer message, routed to the right specialist."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"query": "Where is my order ORD-12345?", "customer_id": "CUS-001"}]})

    query: str = Field(min_length=1, max_length=4000, description="the customer's message, free text")
    customer_id: str = Field(min_length=1, max_length=64, description="your id of the customer, passed to the crew and returned in the result")
    priority: int | None = _priority()


class DesignData(BaseModel):
    """The first design's request data: free-form, with these keys checked when present."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True)

    order_id: str | None = Field(None, pattern=ORDER_ID, description="order number, e.g. ORD-12345 (order and return requests)")
    sku: str | None = Field(None, pattern=SKU, description="the product, e.g. SKU-001 (product and return requests)")
    reason: str | None = Field(None, max_length=500, description="why the customer returns it (return requests)")
    query: str | None = Field(None, min_length=1, max_length=2000, description="what the customer asks, e.g. specifications")
    question: str | None = Field(None, min_length=1, max_length=2000, description="the customer's question, free text (same as query)")
    priority: int | None = _priority()


class DesignRequest(_Input):
    """``{"customer_id": "CUST-001", "request_type": "order", "data": {"order_id": "ORD-12345", "priority": 5}}``."""

    customer_id: str = Field(min_length=1, max_length=64, description="your id of the customer, e.g. CUST-001")
    request_type: str = Field(min_length=1, max_length=64, description="order, return or product; anything else goes to the support router")
    data: DesignData = Field(default_factory=DesignData, description="the request's details; its priority 0-10 picks the lane when the producer was given none")
    # The producers read a priority here before the nested one (contract §13): the field the lane came from is no error.
    priority: int | None = _priority()


class DesignAction(_Input):
    """The first design's fan-out sub-task data, ``{"action": "analyze_reviews"}``: the crew does that action, given the results of the steps it runs after."""

    action: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_ -]*$",
                        description="what to do, e.g. analyze_reviews, sentiment_analysis, generate_recommendation")
    sku: str | None = Field(None, pattern=SKU, description="the product it concerns, if any")
    priority: int | None = _priority()

    @property
    def question(self) -> str:
        """``analyze_reviews`` -> "Analyze reviews." (the task the crew is given)."""
        return self.action.replace("_", " ").replace("-", " ").strip().capitalize() + "."


class DesignSubTask(_Input):
    """The payload the first design's ``fan_out`` enqueues for one sub-task, ``{"parent_id", "sub_task_id", "input": {"action": ...}}``: the crew does ``input``, given the ``results`` of its ``dependencies`` when they come."""

    parent_id: str = Field(min_length=1, max_length=200, description="the request the sub-task belongs to, returned in the result")
    sub_task_id: str = Field(min_length=1, max_length=200, description="the sub-task's id, returned in the result (key your fan-in on it)")
    input: DesignAction = Field(description='what to do, e.g. {"action": "analyze_reviews"}')
    dependencies: list[str] | None = Field(None, max_length=64, description="ids of the sub-tasks it builds on")
    results: dict[str, Any] | None = Field(None, max_length=64, description="their results, {sub_task_id: result}: given to the crew as earlier steps' answers")
    priority: int | None = _priority()


def _pick(own: type[BaseModel], value: Any) -> Any:
    # Validating here (not as a union) keeps error locations those of the chosen model: "order_id", not "OrderInput.order_id".
    if isinstance(value, dict):
        chosen = (DesignRequest if "request_type" in value else DesignSubTask if "sub_task_id" in value
                  else DesignAction if "action" in value else own)
        return chosen.model_validate(value)
    return value


def _picker(own: type[BaseModel]) -> Any:
    """The before-validator of a request model below: the first design's shape, else ``own``."""
    def shape(cls: type, value: Any) -> Any:
        return _pick(own, value)
    return model_validator(mode="before")(classmethod(shape))


class OrderRequest(RootModel[DesignRequest | DesignSubTask | DesignAction | OrderInput]):
    _shape = _picker(OrderInput)


class ReturnsRequest(RootModel[DesignRequest | DesignSubTask | DesignAction | ReturnsInput]):
    _shape = _picker(ReturnsInput)


class ProductRequest(RootModel[DesignRequest | DesignSubTask | DesignAction | ProductInput]):
    _shape = _picker(ProductInput)


class SupportRequest(RootModel[DesignRequest | DesignSubTask | DesignAction | SupportInput]):
    _shape = _picker(SupportInput)
