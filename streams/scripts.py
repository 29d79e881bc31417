"""The Lua scripts, loaded once per client; redis-py runs them with EVALSHA and reloads on NOSCRIPT."""

from __future__ import annotations

import secrets
from functools import cache
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError


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


class NodeScript(AsyncScript):
    """On Redis Cluster, a NOSCRIPT loads the script on the master of the call's keys only. redis-py loads it on every
    master, so a master that hangs would hold up a call on another (a failover's fresh master, a new shard: the first
    call of each script there) until the socket timeout (streams.slow_slots)."""

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        client = client or self.registered_client
        if not isinstance(client, RedisCluster) or not keys:
            return await super().__call__(keys, args, client)
        call = (*keys, *(args or ()))
        for _ in range(2):  # a second NOSCRIPT: the keys' master changed in between (a failover); loaded there too
            try:
                return await client.evalsha(self.sha, len(keys), *call)
            except NoScriptError:
                node = client.get_node_from_key(str(keys[0]))
                await client.execute_command("SCRIPT LOAD", self.script, target_nodes=node)
        return await client.evalsha(self.sha, len(keys), *call)


class Scripts:
    """The Lua scripts (see ``streams/lua/``), bound to one client."""

    def __init__(self, redis: Redis) -> None:
        self.publish: AsyncScript = NodeScript(redis, _source("publish"))
        self.start: AsyncScript = NodeScript(redis, _with_library("groups", "tenant_cap", "start"))
        self.settle: AsyncScript = NodeScript(redis, _with_library("workflow", "groups", "tenant_cap", "settle"))
        self.promote: AsyncScript = NodeScript(redis, _source("promote"))
        self.renew: AsyncScript = NodeScript(redis, _source("renew"))
        self.let_go: AsyncScript = NodeScript(redis, _source("let_go"))
        self.replay: AsyncScript = NodeScript(redis, _source("replay"))
        self.forget: AsyncScript = NodeScript(redis, _source("forget"))
        self.trim: AsyncScript = NodeScript(redis, _with_library("groups", "trim"))
        self.wf_start: AsyncScript = NodeScript(redis, _with_library("workflow", "wf_start"))
        self.wf_expire: AsyncScript = NodeScript(redis, _with_library("workflow", "wf_expire"))
        self.trim_results: AsyncScript = NodeScript(redis, _with_library("groups", "trim_results"))
        self.dead_once: AsyncScript = NodeScript(redis, _source("dead_once"))
        self.unpark: AsyncScript = NodeScript(redis, _with_library("groups", "tenant_cap", "unpark"))
        self.cap_renew: AsyncScript = NodeScript(redis, _with_library("groups", "tenant_cap", "cap_renew"))
        self.cap_agree: AsyncScript = NodeScript(redis, _source("cap_agree"))
        self.upkeep_lease: AsyncScript = NodeScript(redis, _source("upkeep_lease"))


Reply = Any
