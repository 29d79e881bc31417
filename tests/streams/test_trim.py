"""Lanes are trimmed to the oldest entry any group still needs."""

from streams.keys import Keys
from streams.scripts import Scripts


async def test_trim_keeps_pending_and_undelivered_entries(redis, keys: Keys) -> None:
    lane = keys.lane("normal")
    ids = [await redis.xadd(lane, {"n": str(i)}) for i in range(6)]
    await redis.xgroup_create(lane, "workers", id="0")
    await redis.xgroup_create(lane, "audit", id=ids[0])  # a second group that has seen only the first
    delivered = await redis.xreadgroup("workers", "w", {lane: ">"}, count=4)
    for eid, _ in delivered[0][1][:2]:
        await redis.xack(lane, "workers", eid)
    # workers: 0,1 acked, 2,3 pending, 4,5 undelivered; audit: everything after 0 undelivered
    await Scripts(redis).trim(keys=[lane])
    assert [e[0] for e in await redis.xrange(lane)] == ids[1:]
    await redis.xgroup_destroy(lane, "audit")
    await Scripts(redis).trim(keys=[lane])
    assert [e[0] for e in await redis.xrange(lane)] == ids[2:]
    for eid in ids[2:4]:
        await redis.xack(lane, "workers", eid)
    await Scripts(redis).trim(keys=[lane])
    assert [e[0] for e in await redis.xrange(lane)] == ids[4:]
