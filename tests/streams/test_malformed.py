"""A malformed entry never crashes a worker or blocks the group: it is rejected and dead-lettered."""

import pytest

from streams.dead import list_dead
from streams.keys import Keys
from tests.support import wait_results

MALFORMED = {
    "no-agent": ({"data": "{}"}, "missing field 'agent'"),
    "no-data": ({"agent": "echo"}, "missing field 'data'"),
    "non-json": ({"agent": "echo", "data": "{oops"}, "not JSON"),
    "non-object": ({"agent": "echo", "data": '"just a string"'}, "must be a JSON object"),
    "unknown-agent": ({"agent": "no-such-agent", "data": "{}"}, "unknown agent 'no-such-agent'"),
    "oversized": ({"agent": "echo", "data": '{"blob": "' + "x" * 5000 + '"}'}, "over the 4096-byte limit"),
    "zero-attempts": ({"agent": "echo", "data": "{}", "max_attempts": "0"}, "max_attempts"),
    "text-attempts": ({"agent": "echo", "data": "{}", "max_attempts": "three"}, "max_attempts"),
    "bad-timeout": ({"agent": "echo", "data": "{}", "timeout_s": "-1"}, "timeout_s"),
    "endless-timeout": ({"agent": "echo", "data": "{}", "timeout_s": "inf"}, "field 'timeout_s': Input should be a finite number"),
    "1e400-timeout": ({"agent": "echo", "data": "{}", "timeout_s": "1e400"}, "field 'timeout_s': Input should be a finite number"),
    "long-timeout": ({"agent": "echo", "data": "{}", "timeout_s": "86401"}, "field 'timeout_s': Input should be less than or equal to 86400"),
    "endless-attempts": ({"agent": "echo", "data": "{}", "max_attempts": "9" * 30}, "field 'max_attempts': Input should be less than or equal to 1000"),
    "bad-deadline": ({"agent": "echo", "data": "{}", "deadline": "soon"}, "deadline"),
    "nan": ({"agent": "echo", "data": '{"x": NaN}'}, "not JSON"),
    "infinity": ({"agent": "echo", "data": '{"x": [-Infinity]}'}, "not JSON"),
    "1e400": ({"agent": "echo", "data": '{"x": 1e400}'}, "infinity"),
    "wide-int": ({"agent": "echo", "data": '{"n": [1, 123456789012345678901234567890]}'}, "beyond 64 bits"),
    "wide-negative": ({"agent": "echo", "data": '{"n": -9223372036854775809}'}, "beyond 64 bits"),
    "bad-echo-input": ({"agent": "echo", "data": '{"sleep_s": "long"}'}, "sleep_s must be a number"),
}


async def test_every_malformed_entry_is_rejected_and_dead_lettered(redis, keys: Keys, workers) -> None:
    # Given a worker with a 4 KiB request cap
    workers.start("--concurrency", "4", env={"STREAMCREW_MAX_REQUEST_BYTES": "4096"})
    # When every kind of malformed entry is XADDed, with good requests between them
    ids = {}
    for name, (fields, _) in MALFORMED.items():
        ids[name] = await redis.xadd(keys.lane("normal"), {**fields, "id": name})
        await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": f"good-after-{name}"})
    got = await wait_results(redis, keys, 2 * len(MALFORMED), timeout=30)
    by_id = {r.id: r for r in got}
    # Then each malformed one is rejected with its reason, and every good one completed
    for name, (_, reason) in MALFORMED.items():
        assert by_id[name].status == "rejected", (name, by_id[name])
        assert reason in (by_id[name].error or ""), (name, by_id[name].error)
        assert by_id[f"good-after-{name}"].status == "completed"
    # And each has a dead letter naming its reason, with the raw request kept for inspection
    dead = {d.id: d for d in await list_dead(redis, keys)}
    assert set(dead) == set(MALFORMED)
    assert dead["non-json"].request["data"] == "{oops"
    assert dead["oversized"].source_stream == keys.lane("normal")
    # And the group is not blocked: nothing pending, the worker alive
    assert (await redis.xpending(keys.lane("normal"), "workers"))["pending"] == 0
    assert all(w.alive() for w in workers.children)


async def test_an_id_outside_the_alphabet_is_rejected_with_the_reason(redis, keys: Keys, workers) -> None:
    workers.start()
    bad = await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "commande é"})
    step_like = await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "wf-1::s1"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "wf-1:step.a_2"})
    got = {r.id: r for r in await wait_results(redis, keys, 3, timeout=20)}
    # Then a malformed id is rejected under the entry's generated id: it names no record or key
    assert got[bad].status == "rejected"
    assert "job id must be 1-512 ASCII letters, digits, '_', '.', ':' or '-'" in (got[bad].error or "")
    assert not await redis.exists(keys.job("commande é"))
    # And so is an id with '::' that is not the workflow script's own step entry (it could name another's step)
    assert got[step_like].status == "rejected" and "'::' is reserved" in (got[step_like].error or "")
    assert not await redis.exists(keys.job("wf-1::s1"))
    dead = {d.request.get("id"): d for d in await list_dead(redis, keys)}
    assert dead["commande é"].id == bad and dead["wf-1::s1"].id == step_like
    assert got["wf-1:step.a_2"].status == "completed"


@pytest.mark.parametrize("field", ["id", "webhook"])
async def test_empty_optional_fields_do_not_crash(redis, keys: Keys, workers, field: str) -> None:
    workers.start()
    await redis.xadd(keys.lane("low"), {"agent": "echo", "data": "{}", field: ""})
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert result.status in ("completed", "rejected")
    assert all(w.alive() for w in workers.children)
