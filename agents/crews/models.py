"""Input models of the support agents; invalid input ends the job ``rejected``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agents.tools.functions import ORDER_ID, SKU


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class OrderInput(_Input):
    order_id: str = Field(pattern=ORDER_ID, description="order number, e.g. ORD-12345")
    question: str = Field("What is the status of my order?", min_length=1, max_length=2000)


class ReturnsInput(_Input):
    order_id: str = Field(pattern=ORDER_ID)
    sku: str | None = Field(None, pattern=SKU, description="the item to return; the whole order when omitted")
    reason: str = Field("not given", max_length=500)
    question: str = Field("I would like to return my order.", min_length=1, max_length=2000)


class ProductInput(_Input):
    question: str = Field(min_length=1, max_length=2000)
    sku: str | None = Field(None, pattern=SKU)


class SupportInput(_Input):
    query: str = Field(min_length=1, max_length=4000, description="the customer's message, free text")
    customer_id: str = Field(min_length=1, max_length=64)

