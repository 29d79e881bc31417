"""Publishing: explicit ids never collide with generated ones, and an id-less job never adopts a record."""

from __future__ import annotations

import pytest

from streams.errors import InvalidRequest
from streams.keys import Keys
from streams.producer import Producer


@pytest.mark.parametrize("job_id", ["1700000000000-0", "normal:1700000000000-7", "low:1-1"])
async def test_explicit_ids_of_the_generated_shapes_are_refused(redis, keys: Keys, producer: Producer, job_id: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequest, match="reserved"):
        await producer.publish("echo", {}, id=job_id)
    assert not await redis.exists(keys.lane("normal"))


async def test_ids_of_other_shapes_are_fine(producer: Producer) -> None:
    for job_id in ("ORD-12345-status", "wf-42:reviews", "1700000000000", "a-1-2", "x.y_z"):
        assert (await producer.publish("echo", {}, id=job_id)).job_id == job_id


async def test_an_id_less_job_whose_both_names_are_taken_is_withdrawn(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    # Given records squatting the next entry ID of the clock and its '<lane>:' form (only a raw XADD can do it)
    ahead = 9_999_999_999_000
    await redis.set(keys.clock, f"{ahead}-0")
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        await redis.hset(keys.job(job_id), mapping={"status": "queued", "tenant": "squatter"})
    # When an id-less job is published on that entry ID
    published = await producer.publish("echo", {"mine": True})
    # Then it adopts neither record: it is answered 'conflict' and its entry is withdrawn
    assert (published.job_id, published.status, published.created) == ("", "conflict", False)
    assert await redis.xlen(keys.lane("normal")) == 0
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        assert await redis.hgetall(keys.job(job_id)) == {"status": "queued", "tenant": "squatter"}
    # And the next one gets a fresh id
    assert (await producer.publish("echo", {})).job_id == f"{ahead}-2"
