"""The Lua scripts, loaded once per client; redis-py runs them with EVALSHA and reloads on NOSCRIPT."""

from __future__ import annotations

import secrets
from functools import cache
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript


@cache
def _source(name: str) -> str:
    return resources.files("streams").joinpath("lua", f"{name}.lua").read_text()


def _with_library(*names: str) -> str:
    """The last script with libraries of shared functions in front of it: ``workflow.lua`` (the workflow fan-in),
    ``groups.lua`` (stream IDs and what a stream's consumer groups still need), ``tenant_cap.lua`` (per-tenant caps,
    which needs ``groups.lua``)."""
    return "\n".join(_source(name) for name in names)


# How long a call's receipt (Keys.receipt) answers a copy of the call. redis-py sends copies within its retries
# (two, after a 15 s socket timeout each); a stalled Redis runs all copies together once it is back.
RECEIPT_TTL_MS = 120_000


def receipt_token() -> str:
    """A fresh token for one call's receipt: a copy of the call (same arguments) shares it, another call does not."""
    return secrets.token_hex(8)


class Scripts:
    """The Lua scripts (see ``streams/lua/``), bound to one client."""

    def __init__(self, redis: Redis) -> None:
        self.publish: AsyncScript = redis.register_script(_source("publish"))
        self.start: AsyncScript = redis.register_script(_with_library("groups", "tenant_cap", "start"))
        self.settle: AsyncScript = redis.register_script(_with_library("workflow", "groups", "tenant_cap", "settle"))
        self.promote: AsyncScript = redis.register_script(_source("promote"))
        self.renew: AsyncScript = redis.register_script(_source("renew"))
        self.let_go: AsyncScript = redis.register_script(_source("let_go"))
        self.replay: AsyncScript = redis.register_script(_source("replay"))
        self.forget: AsyncScript = redis.register_script(_source("forget"))
        self.trim: AsyncScript = redis.register_script(_with_library("groups", "trim"))
        self.wf_start: AsyncScript = redis.register_script(_with_library("workflow", "wf_start"))
        self.wf_expire: AsyncScript = redis.register_script(_with_library("workflow", "wf_expire"))
        self.trim_results: AsyncScript = redis.register_script(_with_library("groups", "trim_results"))
        self.dead_once: AsyncScript = redis.register_script(_source("dead_once"))
        self.unpark: AsyncScript = redis.register_script(_with_library("groups", "tenant_cap", "unpark"))
        self.cap_renew: AsyncScript = redis.register_script(_with_library("groups", "tenant_cap", "cap_renew"))
        self.cap_agree: AsyncScript = redis.register_script(_source("cap_agree"))


Reply = Any
