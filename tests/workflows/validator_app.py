"""A worker ``--app`` module: ``shout``, whose input model's own validator raises AttributeError (not ValueError) on a
``name`` that is not text, as user code often does; pydantic passes such an error on instead of a ValidationError."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator

from agents import agent


class ShoutInput(BaseModel):
    name: str

    @field_validator("name", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> str:
        return str(value.upper())  # AttributeError for an int


@agent("shout", input_model=ShoutInput)
async def shout(data: ShoutInput) -> dict[str, Any]:
    return {"shout": data.name}
