"""A worker ``--app`` module for tests/agents/test_agent_error_secrets.py: an agent whose upstream call fails.

``upstream_call`` GETs ``$UPSTREAM_URL`` (its credentials and ``?api_key=`` come from the worker's
environment, as an agent's own configuration does) with httpx or aiohttp and lets the client's error rise:
both quote the URL they were asked for.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import httpx

from agents import AgentContext, agent


@agent("upstream_call")
async def upstream_call(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    url = os.environ["UPSTREAM_URL"]
    if data.get("client") == "aiohttp":
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            response.raise_for_status()
    else:
        async with httpx.AsyncClient() as client:
            (await client.get(url)).raise_for_status()
    return {"ok": True}
