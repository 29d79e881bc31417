"""Lanes are trimmed to the oldest entry any group still needs; the results stream too, up to a hard cap."""

import pytest
from prometheus_client import REGISTRY

from streams.keys import Keys
from streams.retention import trim_lanes, trim_results
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
    await Scripts(redis).trim(keys=[lane], args=[0, 0])
    assert [e[0] for e in await redis.xrange(lane)] == ids[1:]
    await redis.xgroup_destroy(lane, "audit")
    await Scripts(redis).trim(keys=[lane], args=[0, 0])
    assert [e[0] for e in await redis.xrange(lane)] == ids[2:]
    for eid in ids[2:4]:
        await redis.xack(lane, "workers", eid)
    await Scripts(redis).trim(keys=[lane], args=[0, 0])
    assert [e[0] for e in await redis.xrange(lane)] == ids[4:]


async def test_one_call_trims_each_of_a_partitions_streams_to_its_own_need(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given the six work streams of a partition: two with entries their groups have acked (3 and 1 of 4), the rest
    # never written (no key: a partition's idle lanes)
    high, normal = keys.lane("high"), keys.lane("normal")
    ids = {lane: [await redis.xadd(lane, {"n": str(i)}) for i in range(4)] for lane in (high, normal)}
    for lane, acked in ((high, 3), (normal, 1)):
        await redis.xgroup_create(lane, "workers", id="0")
        read = await redis.xreadgroup("workers", "w", {lane: ">"}, count=acked)
        await redis.xack(lane, "workers", *[eid for eid, _ in read[0][1]])
    # When the upkeep trims them in one call (the streams of one slot)
    removed = await trim_lanes(Scripts(redis), keys)
    # Then each lost only what its own group had acknowledged, and the missing ones stayed missing
    assert removed == 4
    assert [e[0] for e in await redis.xrange(high)] == ids[high][3:]
    assert [e[0] for e in await redis.xrange(normal)] == ids[normal][1:]
    assert await redis.exists(*[s for s in keys.work_streams if s not in (high, normal)]) == 0


async def _results(redis, keys: Keys, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [await redis.xadd(keys.results, {"id": f"job-{i}"}) for i in range(n)]


async def test_results_are_trimmed_only_below_what_every_group_acknowledged(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given ten results, a notifier group that has acknowledged six of them and an audit group that read four
    ids = await _results(redis, keys, 10)
    await redis.xgroup_create(keys.results, "notifier", id="0")
    await redis.xgroup_create(keys.results, "audit", id="0")
    read = await redis.xreadgroup("notifier", "n", {keys.results: ">"}, count=6)
    await redis.xack(keys.results, "notifier", *[eid for eid, _ in read[0][1]])
    await redis.xreadgroup("audit", "a", {keys.results: ">"}, count=4)  # pending, not acknowledged
    scripts = Scripts(redis)
    # When the stream is trimmed to keep 3
    assert await trim_results(scripts, keys, keep=3, hard_cap=100) == (0, 0)
    # Then nothing goes: the audit group still needs the first entry
    assert await redis.xlen(keys.results) == 10
    # And once audit acknowledges its four, those go, but not what the notifier still needs (6-9)
    await redis.xack(keys.results, "audit", *ids[:4])
    await redis.xgroup_destroy(keys.results, "audit")
    assert await trim_results(scripts, keys, keep=3, hard_cap=100) == (6, 0)
    assert [e[0] for e in await redis.xrange(keys.results)] == ids[6:]
    # And acknowledged entries go only down to `keep`
    read = await redis.xreadgroup("notifier", "n", {keys.results: ">"})
    await redis.xack(keys.results, "notifier", *[eid for eid, _ in read[0][1]])
    assert await trim_results(scripts, keys, keep=3, hard_cap=100) == (1, 0)
    assert [e[0] for e in await redis.xrange(keys.results)] == ids[7:]


async def test_the_hard_cap_cuts_unread_results_and_counts_them(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given 2,500 results the notifier group has not read, with a hard cap of 1,000
    pipe = redis.pipeline(transaction=False)
    for i in range(2500):
        pipe.xadd(keys.results, {"id": f"job-{i}"})
    await pipe.execute()
    await redis.xgroup_create(keys.results, "notifier", id="0")
    before = REGISTRY.get_sample_value("streamcrew_results_dropped_total") or 0.0
    # When the stream is trimmed
    assert await trim_results(Scripts(redis), keys, keep=10, hard_cap=1000) == (0, 1500)
    # Then it holds the newest 1,000, and the 1,500 cut unread are counted
    assert await redis.xlen(keys.results) == 1000
    assert REGISTRY.get_sample_value("streamcrew_results_dropped_total") == before + 1500


async def test_a_pending_entry_the_hard_cap_cut_no_longer_holds_the_trim(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given 60 results both groups read and acknowledged, but one the audit group's consumer crashed on (pending)
    ids = await _results(redis, keys, 60)
    for group in ("notifier", "audit"):
        await redis.xgroup_create(keys.results, group, id="0")
        read = await redis.xreadgroup(group, "c", {keys.results: ">"})
        await redis.xack(keys.results, group, *[eid for eid, _ in read[0][1]][group == "audit":])
    scripts = Scripts(redis)
    # When the hard cap cuts it (with everything after it: the trim keeps what a group still needs, up to the cap)
    assert await trim_results(scripts, keys, keep=10, hard_cap=50) == (0, 10)
    assert (await redis.xpending(keys.results, "audit"))["min"] == ids[0]  # its pending record stays
    # Then later trims go by the stream as it is: the acknowledged events go (over the hard cap, all of them at once),
    # none counted as dropped
    await _results(redis, keys, 20)
    for group in ("notifier", "audit"):
        read = await redis.xreadgroup(group, "c", {keys.results: ">"})
        await redis.xack(keys.results, group, *[eid for eid, _ in read[0][1]])
    assert await trim_results(scripts, keys, keep=10, hard_cap=50) == (70, 0)
    assert await redis.xlen(keys.results) == 0


async def test_a_lane_entry_deleted_while_pending_no_longer_holds_its_trim(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a lane whose first entry is pending and the rest acknowledged, and that entry then deleted (an XDEL)
    lane = keys.lane("normal")
    ids = [await redis.xadd(lane, {"n": str(i)}) for i in range(5)]
    await redis.xgroup_create(lane, "workers", id="0")
    await redis.xreadgroup("workers", "w", {lane: ">"})
    await redis.xack(lane, "workers", *ids[1:])
    await redis.xdel(lane, ids[0])
    # When the upkeep trims it, Then the acknowledged entries go
    assert await trim_lanes(Scripts(redis), keys) == 4
    assert await redis.xlen(lane) == 0


async def test_acknowledged_results_are_trimmed_to_keep_in_batches(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given 2,500 results the notifier group read and acknowledged
    pipe = redis.pipeline(transaction=False)
    for i in range(2500):
        pipe.xadd(keys.results, {"id": f"job-{i}"})
    await pipe.execute()
    await redis.xgroup_create(keys.results, "notifier", id="$")
    # When trimmed to keep 100: all but 100 go (in batches of TRIM_BATCH), none counted as dropped
    assert await trim_results(Scripts(redis), keys, keep=100, hard_cap=10_000) == (2400, 0)
    assert await redis.xlen(keys.results) == 100
    # And with no group at all, the same
    await redis.xgroup_destroy(keys.results, "notifier")
    for i in range(50):
        await redis.xadd(keys.results, {"id": f"more-{i}"})
    assert await trim_results(Scripts(redis), keys, keep=100, hard_cap=120) == (50, 0)
    assert await redis.xlen(keys.results) == 100


# Entry IDs are two unsigned 64-bit numbers; a raw XADD may name any. Lua's numbers are doubles, exact only to 2^53.
PAST_DOUBLES = [
    [f"1-{2**53 + i}" for i in range(8)],  # sequence numbers a double cannot hold
    [f"{2**53 + 1 + i}-0" for i in range(8)],  # milliseconds too
    [f"1-{2**64 - 3 + i}" for i in range(3)] + [f"2-{i}" for i in range(5)],  # the last sequence number, then the next ms
]


@pytest.mark.parametrize("ids", PAST_DOUBLES, ids=["seq", "ms", "seq-max"])
async def test_trim_compares_entry_ids_past_2_to_the_53_exactly(redis, keys: Keys, ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    # Given a lane of raw XADDs with explicit IDs; group workers has read and acknowledged the first three,
    # group audit has seen only the first
    lane = keys.lane("normal")
    for eid in ids:
        await redis.xadd(lane, {"n": eid}, id=eid)
    await redis.xgroup_create(lane, "workers", id="0")
    await redis.xgroup_create(lane, "audit", id=ids[0])
    read = await redis.xreadgroup("workers", "w", {lane: ">"}, count=3)
    await redis.xack(lane, "workers", *[eid for eid, _ in read[0][1]])
    # When the lane is trimmed, Then exactly what audit has not seen is kept
    await Scripts(redis).trim(keys=[lane], args=[0, 0])
    assert [e[0] for e in await redis.xrange(lane)] == ids[1:]
    # And without audit, exactly what workers has not read: not one entry more, not one less
    await redis.xgroup_destroy(lane, "audit")
    await Scripts(redis).trim(keys=[lane], args=[0, 0])
    assert [e[0] for e in await redis.xrange(lane)] == ids[3:]


async def test_results_trim_compares_entry_ids_past_2_to_the_53_exactly(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given ten results with explicit IDs past 2^53, the notifier group has acknowledged six
    ids = [f"1-{2**53 + i}" for i in range(10)]
    for eid in ids:
        await redis.xadd(keys.results, {"id": eid}, id=eid)
    await redis.xgroup_create(keys.results, "notifier", id="0")
    read = await redis.xreadgroup("notifier", "n", {keys.results: ">"}, count=6)
    await redis.xack(keys.results, "notifier", *[eid for eid, _ in read[0][1]])
    # When trimmed to keep 3, Then the six acknowledged go and the four unacknowledged stay
    assert await trim_results(Scripts(redis), keys, keep=3, hard_cap=100) == (6, 0)
    assert [e[0] for e in await redis.xrange(keys.results)] == ids[6:]


async def _pinned_lane(redis, keys: Keys, n: int) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """A lane of ``n`` entries added long ago, all read by the workers group: the first still running (pending),
    the rest acknowledged; then one entry added now, not yet read."""
    lane = keys.lane("normal")
    pipe = redis.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(lane, {"n": str(i)}, id=f"{1_000 + i}-0")
    ids = [str(x) for x in await pipe.execute()]
    await redis.xgroup_create(lane, "workers", id="0")
    await redis.xreadgroup("workers", "w", {lane: ">"}, count=n)
    for start in range(1, n, 1000):
        await redis.xack(lane, "workers", *ids[start:start + 1000])
    await redis.xadd(lane, {"n": "new"})
    return lane, ids


async def test_acknowledged_entries_behind_a_long_run_are_deleted_not_held(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a lane whose oldest entry runs for long (pending: the bulk trim stops at it) and 2,500 acknowledged after it
    lane, ids = await _pinned_lane(redis, keys, 2501)
    # When the upkeep trims it, Then the acknowledged ones go (in calls of 1,000), but the group's last delivered one
    # (a tombstone there would leave its lag unknown); the running one and the unread one stay
    assert await trim_lanes(Scripts(redis), keys) == 2499
    left = [e[0] for e in await redis.xrange(lane)]
    assert left[:2] == [ids[0], ids[-1]] and len(left) == 3, left
    assert (await redis.xpending(lane, "workers"))["pending"] == 1
    # And the group's lag is still known (only delivered entries were deleted): KEDA and stats read it
    (group,) = await redis.xinfo_groups(lane)
    assert group["lag"] == 1, group


async def test_the_sweep_keeps_what_any_group_still_needs_and_recent_entries(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a pinned lane (above), a second group that was given only the first 10 entries and holds the 5th pending
    lane, ids = await _pinned_lane(redis, keys, 40)
    await redis.xgroup_create(lane, "audit", id="0")
    await redis.xreadgroup("audit", "a", {lane: ">"}, count=10)
    await redis.xack(lane, "audit", *[eid for i, eid in enumerate(ids[:10]) if i != 5])
    # When trimmed, Then only entries both groups were given and neither holds pending go: 1-4 and 6-8 (the 9th is
    # audit's last delivered one)
    assert await trim_lanes(Scripts(redis), keys) == 7
    left = [e[0] for e in await redis.xrange(lane)]
    assert left[:4] == [ids[0], ids[5], ids[9], ids[10]] and len(left) == 1 + 1 + 1 + 30 + 1, left
    assert all(g["lag"] is not None for g in await redis.xinfo_groups(lane))
    # And entries acknowledged behind a pending one added lately wait for the bulk trim (a short run ends soon)
    await redis.xgroup_destroy(lane, "audit")
    fresh = keys.lane("high")
    recent = [await redis.xadd(fresh, {"n": str(i)}) for i in range(3)]
    await redis.xgroup_create(fresh, "workers", id="0")
    await redis.xreadgroup("workers", "w", {fresh: ">"})
    await redis.xack(fresh, "workers", *recent[1:])
    await trim_lanes(Scripts(redis), keys)
    assert [e[0] for e in await redis.xrange(fresh)] == recent
