"""A worker ``--app`` module for tests/agents/test_agent_error_secrets.py: agents whose failure quotes the LLM key.

The text is what a library's error holds once a key reached its data: pydantic's repr cuts a long string short
(``'id-sk-live-ABCDE...9'``) and some messages quote it whole. ``leaky`` raises it, ``leaky_reject`` rejects with it.
"""

from __future__ import annotations

import os
from typing import Any

from agents import AgentContext, Reject, agent


def quoting_the_key() -> str:
    key = os.environ["STREAMCREW_LLM_API_KEYS"]
    return f"1 validation error for TaskOutput raw [input_value=[{{'id': 'id-{key[:13]}...{key[-1]}'}}], and {key} again"


@agent("leaky")
async def leaky(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    raise ValueError(quoting_the_key())


@agent("leaky_reject")
async def leaky_reject(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    raise Reject(quoting_the_key())
