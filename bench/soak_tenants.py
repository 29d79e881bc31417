"""The soak's ``--tenants`` part (bench/soak.py): jobs of three capped tenants, and what the caps must hold through the chaos.

Twice a second each partition's live slots of each tenant are read (members of ``<prefix>:tenant:running:<tenant>``
whose deadline, Redis time, is ahead); none may exceed the partition's share. Once settled, nothing may be left
parked or holding a slot, and (with Redis' clock running on) the runs of a tenant's jobs run once never overlap past
share x partitions.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from streams.keys import Keys
from streams.tenant_cap import parked_key, parked_tenants_key, parse_tenant_caps, running_key
from tests.support import most_at_once

# --tenants: what the workers are told, and the tenants jobs name. t0 (a fifth of the load) runs near its cap and parks
# most of the time; the others park in bursts. Tighter, t0's backlog outgrows what the run's end waits for.
TENANT_CAPS = '{"*": 12, "t0": 6}'
TENANTS = ("t0", "t1", "t2")
TENANT_SHARE = 0.6  # of the jobs and workflows that name a tenant


def tenant_shares(partitions: int) -> dict[str, int]:
    """--tenants: what one partition allows each tenant (streams.tenant_cap: ceil(cap / partitions))."""
    caps = parse_tenant_caps(TENANT_CAPS)
    assert caps is not None
    return {tenant: caps.share(tenant, partitions) for tenant in TENANTS}


async def slots_held(redis: Redis, parts: Sequence[Keys], until: float) -> Counter[str]:
    """--tenants: twice a second, each partition's live slots of each tenant (members whose deadline, Redis TIME ms, is
    ahead); counts the samples, the most seen, and every sample over the partition's share."""
    shares = tenant_shares(len(parts))
    seen: Counter[str] = Counter()
    while time.monotonic() < until:
        await asyncio.sleep(0.5)  # the sampling rate, not a synchronisation
        try:
            for keys in parts:
                seconds, micros = await redis.time()
                now_ms = int(seconds) * 1000 + int(micros) // 1000
                for tenant, share in shares.items():
                    live = int(await redis.zcount(running_key(keys, tenant), now_ms, "+inf"))
                    seen[f"most {tenant}"] = max(seen[f"most {tenant}"], live)
                    if live > share:
                        seen[f"over the share ({tenant}: {live} > {share})"] += 1
            seen["samples"] += 1
        except RedisError as exc:  # Redis stalled, restarting or failing over: the next sample
            seen[type(exc).__name__] += 1
    return seen


async def tenant_problems(redis: Redis, parts: Sequence[Keys], results: list[dict[str, str]], strict: bool) -> dict[str, list[str]]:
    """--tenants, once settled: nothing parked or holding a slot, and (``strict``: Redis' clock ran on, no stall or
    restart expired live slots at once) the runs of a tenant's jobs that ran once never overlapped past its share in
    every partition."""
    shares = tenant_shares(len(parts))
    left = []
    for keys in parts:
        for tenant in TENANTS:
            for what, n in (("parked", await redis.llen(parked_key(keys, tenant))), ("slots", await redis.zcard(running_key(keys, tenant)))):
                if n:
                    left.append(f"{keys.prefix} {tenant}: {n} {what}")
        if await redis.hlen(parked_tenants_key(keys)):
            left.append(f"{keys.prefix}: {await redis.hgetall(parked_tenants_key(keys))} in tenants-parked")
    over = []
    for tenant, share in shares.items():
        # a result's started_at is its first attempt's start: only a job run once gives its run's span (a workflow's own
        # job holds no slot)
        runs = [(int(r["started_at"]), int(r["finished_at"])) for r in results
                if r.get("tenant") == tenant and r.get("agent") != "workflow" and r.get("attempts") == "1"
                and r.get("started_at") and r.get("finished_at")]
        most = most_at_once(runs)
        print(f"  tenant {tenant}: {len(runs):,} runs, at most {most} at once (cap {share} per partition, {share * len(parts)} in all)")
        if strict and most > share * len(parts):
            over.append(f"{tenant}: {most} at once")
    return {"left parked or holding a slot": left, "tenant runs over the cap": over}
