"""streams.outage.Backoff: one line when an outage starts and one when it ends, and no more than that a minute
for a loop that flaps (its writes refused for now, its reads served: upkeep under OOM or NOREPLICAS logged two
lines a second)."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from streams import outage
from streams.outage import Backoff


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "streams.outage" and r.levelno >= logging.WARNING]


async def test_flaps_after_a_logged_outage_are_counted_not_logged_until_one_lasts(caplog: pytest.LogCaptureFixture,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "FLAP_LOGGED_AFTER_S", 0.25)
    backoff = Backoff("upkeep")
    down = RedisConnectionError("down")
    with caplog.at_level(logging.WARNING, logger="streams.outage"):
        # Given an outage, then four short ones right after it (one failed call each)
        for _ in range(5):
            await backoff.failed(down)
            backoff.ok()
        # Then the first is logged, start and end, and the four are not
        assert lines(caplog) == ["upkeep: Redis unavailable (ConnectionError: down); retrying with backoff",
                                 lines(caplog)[1]], lines(caplog)
        assert lines(caplog)[1].startswith("upkeep: Redis is back after")
        # When one lasts longer (three failed calls: 0.1 + 0.2 s of backoff, then the third past 0.25 s)
        for _ in range(3):
            await backoff.failed(down)
        backoff.ok()
    # Then it is logged, with the four it follows, and so is its end
    assert lines(caplog)[2:] == ["upkeep: Redis unavailable (ConnectionError: down); retrying with backoff "
                                 "(4 shorter outages since the last such line)", lines(caplog)[3]], lines(caplog)
    assert lines(caplog)[3].startswith("upkeep: Redis is back after")


async def test_an_outage_a_minute_after_the_last_logged_one_is_logged_at_once(caplog: pytest.LogCaptureFixture,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "FLAP_WINDOW_S", 0.0)
    backoff = Backoff("read")
    with caplog.at_level(logging.WARNING, logger="streams.outage"):
        for _ in range(2):
            await backoff.failed(RedisConnectionError("down"))
            backoff.ok()
    assert [line.split(" (")[0].split(" after")[0] for line in lines(caplog)] == ["read: Redis unavailable", "read: Redis is back"] * 2
