"""streams.slow_slots: a call unanswered past its time marks its slot slow, runs on, and hands on its late answer.

The tracker itself is plain asyncio (no Redis in it): its calls here are futures the test answers. What it does for a
worker on a real cluster with a paused master is tests/cluster/test_paused_master.py."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from streams.slow_slots import SlotSlow, SlowSlots


async def test_a_call_answered_in_time_is_answered_and_marks_nothing() -> None:
    slots = SlowSlots(after_s=0.5)

    async def quick() -> str:
        return "ok"

    assert await slots.call(7, quick()) == "ok"
    assert not slots.slow(7)


async def test_an_error_in_time_is_the_callers() -> None:
    slots = SlowSlots(after_s=0.5)

    async def refused() -> None:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        await slots.call(7, refused())
    assert not slots.slow(7)


async def test_a_late_answer_marks_the_slot_slow_until_it_comes_then_is_handed_on(caplog: pytest.LogCaptureFixture) -> None:
    slots = SlowSlots(after_s=0.05)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    handed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_late(reply: str) -> None:
        handed.set_result(reply)

    # Given a call whose master does not answer in time
    with caplog.at_level(logging.WARNING, logger="streams.slow_slots"), pytest.raises(SlotSlow) as raised:
        await slots.call(7, answer, on_late=on_late)
    # Then the caller goes on, the slot is slow, the other slots are not
    assert raised.value.slot == 7
    assert slots.slow(7) and not slots.slow(8)
    # And when the answer comes, it is handed on and the slot is no longer slow
    answer.set_result("entries")
    assert await asyncio.wait_for(handed, 5) == "entries"
    assert not slots.slow(7)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "hash slot 7 has not answered" in messages[0] and "hash slot 7 answers again" in messages[1], messages


async def test_a_late_call_that_fails_cools_its_slot_down_then_the_slot_is_tried_again() -> None:
    slots = SlowSlots(after_s=0.05, cool_down_s=0.3)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    with pytest.raises(SlotSlow):
        await slots.call(7, answer)
    # When the late call times out
    answer.set_exception(TimeoutError("Timeout reading from 127.0.0.1:7000"))
    await asyncio.sleep(0)
    failed_at = time.monotonic()
    # Then the slot stays slow for the cool-down, then is tried again
    assert slots.slow(7)

    while slots.slow(7):
        assert time.monotonic() - failed_at < 5, "the slot stayed slow past its cool-down"
        await asyncio.sleep(0.02)
    assert time.monotonic() - failed_at >= 0.25


async def test_one_spell_is_logged_once_whatever_the_tries_in_it(caplog: pytest.LogCaptureFixture) -> None:
    slots = SlowSlots(after_s=0.02, cool_down_s=0.0)
    with caplog.at_level(logging.WARNING, logger="streams.slow_slots"):
        for _ in range(3):  # three tries, each unanswered in time and then timed out
            late: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            with pytest.raises(SlotSlow):
                await slots.call(7, late)
            late.set_exception(TimeoutError())
            await asyncio.sleep(0)

        async def quick() -> str:
            return "ok"

        assert await slots.call(7, quick()) == "ok"  # the master answers again
    assert [("answers again" in r.getMessage()) for r in caplog.records] == [False, True]


async def test_a_caller_cancelled_while_waiting_cancels_its_call() -> None:
    slots = SlowSlots(after_s=5)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(slots.call(7, answer))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert answer.cancelled()
    assert not slots.slow(7)


async def test_a_slot_is_slow_with_its_master_and_only_with_it() -> None:
    masters = {1: "Redis master a", 2: "Redis master a", 3: "Redis master b"}
    slots = SlowSlots(after_s=0.05, master_of=masters.__getitem__)
    late: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    with pytest.raises(SlotSlow):
        await slots.call(1, late)
    # the other slot of that master is slow too (its pause is met once), the other master's is not
    assert slots.slow(1) and slots.slow(2) and not slots.slow(3)
    # and after a failover moved slot 2 to another master, it is no longer
    masters[2] = "Redis master c"
    assert not slots.slow(2)
    late.set_result("ok")


async def test_work_left_in_the_background_keeps_its_slot_slow_until_it_ends_and_its_failure_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    slots = SlowSlots(after_s=0.05)
    start: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    # Given a start whose master does not answer in time: the caller goes on, the start is left running
    await slots.wait_or_leave(7, start, "starting what was read")
    assert slots.slow(7) and not start.done()
    # When it fails once the master answers, the failure is logged and the slot is tried again after its cool-down
    with caplog.at_level(logging.ERROR, logger="streams.slow_slots"):
        start.set_exception(RuntimeError("the handler broke"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert "starting what was read: failed once its master answered" in caplog.text
    assert "the handler broke" in caplog.text


async def test_a_long_round_left_running_unmarked_leaves_its_master_unmarked() -> None:
    slots = SlowSlots(after_s=0.05)
    round_: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    # Given several calls in a row (an upkeep round) still running past the slow-call time on a healthy master
    with pytest.raises(SlotSlow) as raised:
        await slots.call(7, round_, mark=False)
    # Then the caller gets it to wait for itself, and the master's other calls are not skipped
    assert raised.value.running is round_ and not round_.done()
    assert not slots.slow(7)
    round_.set_result(None)


async def test_a_spell_ends_when_another_master_serves_its_slots(caplog: pytest.LogCaptureFixture) -> None:
    serving: dict[str, str | None] = {"master": "Redis master 10.0.0.3:6379"}

    def master_of(slot: int) -> str:
        if serving["master"] is None:
            raise KeyError(slot)  # as redis-py's map between a failure and the promotion, without full coverage
        return serving["master"]

    slots = SlowSlots(after_s=0.02, cool_down_s=60.0, master_of=master_of)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    with caplog.at_level(logging.WARNING, logger="streams.slow_slots"):
        # Given a master whose late call timed out (in its cool-down)
        with pytest.raises(SlotSlow):
            await slots.call(7, answer)
        answer.set_exception(TimeoutError("Timeout reading from 10.0.0.3:6379"))
        await asyncio.sleep(0)
        assert slots.slow(7)
        # When the cluster client maps its slot to no master (a failover under way): the spell goes on
        serving["master"] = None
        slots.slow(7)
        assert len(caplog.records) == 1
        # When its replica is promoted: the client maps the slot to another master
        serving["master"] = "Redis master 10.0.0.6:6379"
        # Then the slot is not slow, and the spell's end is logged once, naming the new master
        assert not slots.slow(7) and not slots.slow(8)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "10.0.0.3:6379 has not answered" in messages[0], messages
    assert "10.0.0.3:6379: its partitions are served by Redis master 10.0.0.6:6379 now" in messages[1], messages
