"""The bridge's two faust agents through faust's own test support (``agent.test_context()``), offline, on the suite's Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiokafka.errors import MessageSizeTooLargeError

from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP, ResultBatch, ResultsReader
from streams.envelope import JobResult, Status
from streams.records import get_job
from tests.consumers.kafka.results_path import Kafka, forward_with_runtime
from tests.support import wait_for_log, wait_results, wait_until


def request(**fields: Any) -> bytes:
    return orjson.dumps({"agent": "echo", "data": {"n": 1}, **fields})


async def processed(agent: Any, n: int) -> None:
    """Wait (bounded) until the test agent has yielded ``n`` values."""
    async with agent.new_value_processed:
        await asyncio.wait_for(agent.new_value_processed.wait_for(lambda: agent.processed_offset >= n), 10)


async def test_valid_records_are_published_once_to_their_lanes(bridge: Any, redis: Any, keys: Any) -> None:
    async with bridge.requests_agent.test_context() as agent:
        await agent.put(request(priority=9), key=b"job-high")
        await agent.put(request(lane="low", data={"n": 2}), key=b"job-low")
        await agent.put(request(id="job-normal"))
    outcomes = list(agent.results.values())
    assert [o.published for o in outcomes] == [["job-high"], ["job-low"], ["job-normal"]]
    high, low, normal = [await redis.xrange(keys.lane(lane)) for lane in ("high", "low", "normal")]
    assert [f["id"] for _, f in high] == ["job-high"] and [f["id"] for _, f in low] == ["job-low"]
    assert [f["id"] for _, f in normal] == ["job-normal"]
    assert orjson.loads(low[0][1]["data"]) == {"n": 2}
    record = await get_job(redis, keys, "job-low")
    assert record is not None and record.status == "queued"


async def test_a_repeated_record_runs_once(bridge: Any, redis: Any, keys: Any, workers: Any) -> None:
    """Kafka's at-least-once redelivery: the same key and value twice, one lane entry, one execution, one result."""
    async with bridge.requests_agent.test_context() as agent:
        first = await agent.put(request(), key=b"job-twice")
        second = await agent.put(request(), key=b"job-twice")
    assert first.message.offset != second.message.offset
    assert [(o.published, o.duplicates) for o in agent.results.values()] == [(["job-twice"], []), ([], ["job-twice"])]
    assert await redis.xlen(keys.lane("normal")) == 1
    wait_for_log(workers.start(wait_ready=False), " ready: ", timeout=120)  # CrewAI's import is slow on a loaded machine
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    assert result.id == "job-twice" and result.status == Status.COMPLETED and result.attempts == 1
    async with bridge.requests_agent.test_context() as again:  # after the job ended, too
        await again.put(request(), key=b"job-twice")
    assert list(again.results.values())[0].duplicates == ["job-twice"]
    assert await redis.xlen(keys.results) == 1


@pytest.mark.parametrize(("value", "key", "error"), [
    (b"not json", b"bad-json", "not JSON"),
    (b"[1, 2]", b"bad-list", "must be a JSON object"),
    (orjson.dumps({"data": {}}), b"bad-agent", "agent"),
    (orjson.dumps({"agent": "echo", "data": {}, "priority": 11}), b"bad-priority", "priority must be 0-10"),
    (orjson.dumps({"agent": "echo", "data": {}, "max_attempts": 0}), b"bad-attempts", "max_attempts"),
    (orjson.dumps({"agent": "echo", "data": {}, "webhok": "x"}), b"bad-field", "unknown field"),
    # a workflow step's fields are the workflow script's, not a producer's (the gateway refuses them too)
    (orjson.dumps({"agent": "echo", "data": {}, "inputs": {"reviews": "forged"}}), b"bad-inputs", "unknown field"),
    (orjson.dumps({"agent": "echo", "data": {}, "parent": "wf-other", "step": "s1"}), b"bad-parent", "unknown field"),
    (orjson.dumps({"agent": "echo", "data": {}, "id": "other"}), b"bad-id", "disagree"),
    (None, b"tombstone", "no value"),
    (request(), b"1700000000000-0", "shape of a generated id"),  # reserved: the Producer would refuse the whole batch
    # an integer past 64 bits: orjson reads it as a float, which would change the number the agent gets
    (b'{"agent": "echo", "data": {"order": 123456789012345678901234567890}}', b"bad-wide-int", "beyond 64 bits"),
    (b'{"agent": "echo", "data": "{\\"order\\": 123456789012345678901234567890}"}', b"bad-wide-int-text", "beyond 64 bits"),
    # true is no number (the lax validation read it as 1: a deadline in 1970, the job expired), nor is an endless timeout
    (orjson.dumps({"agent": "echo", "data": {}, "deadline": True}), b"bad-bool-deadline", "must be a number"),
    (orjson.dumps({"agent": "echo", "data": {}, "timeout_s": True}), b"bad-bool-timeout", "must be a number"),
    (b'{"agent": "echo", "data": {}, "timeout_s": "inf"}', b"bad-inf-timeout", "timeout_s': Input should be a finite number"),
    (orjson.dumps({"agent": "echo", "data": {}, "timeout_s": 86401}), b"bad-long-timeout", "less than or equal to 86400"),
    (orjson.dumps({"agent": "echo", "data": {}, "max_attempts": 1001}), b"bad-many-attempts", "less than or equal to 1000"),
    # what the Producer refuses besides the size (the batch was refused and retried for good, its partition stalled)
    (orjson.dumps({"agent": "echo", "data": {}, "tenant": "acme corp"}), b"bad-tenant", "tenant must not contain whitespace"),
    (orjson.dumps({"agent": "echo", "data": {}, "webhook": "not a url"}), b"bad-webhook", "webhook"),
])
async def test_invalid_records_are_dead_lettered_and_their_offsets_acked(
    bridge: Any, redis: Any, keys: Any, value: bytes | None, key: bytes, error: str,
) -> None:
    async with bridge.requests_agent.test_context() as agent:
        bad = await agent.put(value, key=key, partition=3)
        good = await agent.put(request(), key=b"job-after")
        await wait_until(lambda: bad.message.acked and good.message.acked, timeout=10, what="both offsets acked")
    (invalid, valid) = agent.results.values()
    assert invalid.invalid == [key.decode()] and invalid.published == []
    assert valid.published == ["job-after"], "the partition moves on past an invalid record"
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert letter["reason"] == "invalid" and error in letter["error"], letter
    assert letter["id"] == key.decode() and letter["source_stream"] == f"kafka:{bridge.requests_agent.channel.get_topic_name()}"
    assert letter["source_id"] == f"3-{bad.message.offset}"
    if value is not None:
        assert orjson.loads(letter["request"])["value"] == value.decode()
    assert await redis.xlen(keys.lane("normal")) == 1 and await redis.xlen(keys.results) == 0


async def test_results_are_produced_keyed_by_job_id_and_xacked_only_after_kafka_acknowledged(bridge: Any, redis: Any, keys: Any) -> None:
    results = [JobResult(id=f"job-{n}", agent="echo", status=Status.COMPLETED, result={"echo": {"n": n}}, attempts=1) for n in range(3)]
    for r in results:
        await redis.xadd(keys.results, r.to_fields())
    batches: list[ResultBatch] = []

    async def deliver(batch: ResultBatch) -> None:
        batches.append(batch)

    reader = ResultsReader(redis, (keys,), deliver=deliver, release=lambda s, e, settled=True: None, let_go=_let_go_nothing)
    reply = await redis.xreadgroup(KAFKA_BRIDGE_GROUP, "test-bridge", {keys.results: ">"}, count=10)
    await reader.on_entries(keys.results, reply[0][1], reclaimed=False)
    (batch,) = batches

    sent: list[tuple[bytes, bytes]] = []
    acks: list[asyncio.Future[object]] = []
    all_sent = asyncio.Event()

    async def send(key: bytes, value: bytes) -> asyncio.Future[object]:
        sent.append((key, value))
        acks.append(asyncio.get_running_loop().create_future())
        if len(sent) == len(results):
            all_sent.set()
        return acks[-1]

    bridge.results_out.send = send
    pending = lambda: redis.xpending(keys.results, KAFKA_BRIDGE_GROUP)  # noqa: E731
    async with bridge.results_agent.test_context() as agent:
        await agent.put(batch, wait=False)
        await asyncio.wait_for(all_sent.wait(), 10)
        assert [k for k, _ in sent] == [b"job-0", b"job-1", b"job-2"]
        assert [orjson.loads(v)["result"] for _, v in sent] == [{"echo": {"n": n}} for n in range(3)]
        acks[0].set_result("ack")
        acks[2].set_result("ack")
        await asyncio.sleep(0)  # let the agent run: it must still wait for the second acknowledgement
        assert (await pending())["pending"] == 3, "nothing is XACKed before every send future resolved"
        acks[1].set_result("ack")
        await processed(agent, 1)
    assert list(agent.results.values()) == [[e.entry_id for e in batch.records]]
    assert (await pending())["pending"] == 0


async def test_a_drain_leaves_an_entry_another_bridge_took_over_with_it(bridge: Any, redis: Any, keys: Any) -> None:
    # Given two result entries read by this bridge ("test-bridge"), the first since taken over by another bridge
    # (its sweep, after a lease that ran out unrenewed), which is sending it to the topic now
    reply, _ = await two_results_read(redis, keys, "taken")
    first, second = (eid for eid, _ in reply[0][1])
    await redis.xclaim(keys.results, KAFKA_BRIDGE_GROUP, "other-bridge", 0, [first], justid=True)
    # When this bridge drains with both unsent and hands them back
    handed_back = await bridge.runtime.handler.hand_back([(keys.results, first), (keys.results, second)])
    # Then only its own went back, marked idle past the lease for the next sweep; the other bridge's stays with it
    pending = {p["message_id"]: p for p in await redis.xpending_range(keys.results, KAFKA_BRIDGE_GROUP, min="-", max="+", count=10)}
    assert (pending[first]["consumer"], pending[second]["consumer"]) == ("other-bridge", "test-bridge"), pending
    assert pending[first]["time_since_delivered"] < bridge.runtime.lease_s * 1000, pending[first]
    assert pending[second]["time_since_delivered"] > bridge.runtime.lease_s * 1000, pending[second]
    assert handed_back == 1


async def _let_go_nothing(slots: list[Any]) -> int:
    return 0


async def two_results_read(redis: Any, keys: Any, tag: str) -> tuple[list[Any], ResultBatch]:
    """Two result events ``<tag>-0`` and ``<tag>-1``, read by the bridge's group: the entries and their batch."""
    for n in range(2):
        await redis.xadd(keys.results, JobResult(id=f"{tag}-{n}", agent="echo", status=Status.FAILED, error="boom", attempts=3).to_fields())
    reply = await redis.xreadgroup(KAFKA_BRIDGE_GROUP, "test-bridge", {keys.results: ">"}, count=10)
    batches: list[ResultBatch] = []
    reader = ResultsReader(redis, (keys,), deliver=lambda b: _append(batches, b), release=lambda s, e, settled=True: None, let_go=_let_go_nothing)
    await reader.on_entries(keys.results, reply[0][1], reclaimed=False)
    return reply, batches[0]


async def refusing_big_0(key: bytes, value: bytes) -> asyncio.Future[object]:
    """Kafka's send, refusing record ``big-0`` as too large (at send, as aiokafka's producer does)."""
    if key == b"big-0":
        raise MessageSizeTooLargeError("The message is 2000000 bytes when serialized which is larger than max_request_size")
    fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    fut.set_result("ack")
    return fut


async def forwarded(bridge: Any, batch: ResultBatch, send: Any) -> list[str]:
    """The entry IDs the results agent acked after forwarding ``batch`` through ``send``."""
    bridge.results_out.send = send
    async with bridge.results_agent.test_context() as agent:
        await agent.put(batch)
    (acked,) = agent.results.values()
    return list(acked)


async def test_a_result_kafka_refuses_stays_pending(bridge: Any, redis: Any, keys: Any) -> None:
    reply, batch = await two_results_read(redis, keys, "job")

    async def send(key: bytes, value: bytes) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if key == b"job-0":
            fut.set_exception(RuntimeError("MessageSizeTooLarge"))
        else:
            fut.set_result("ack")
        return fut

    acked = await forwarded(bridge, batch, send)
    assert acked == [reply[0][1][1][0]]
    detail = await redis.xpending_range(keys.results, KAFKA_BRIDGE_GROUP, min="-", max="+", count=10)
    assert [d["message_id"] for d in detail] == [reply[0][1][0][0]], "the refused one waits for its reclaim"


async def test_a_result_too_large_for_kafka_is_dead_lettered_not_retried_forever(bridge: Any, redis: Any, keys: Any) -> None:
    # Given two result events, the first of which Kafka refuses as too large (at send, as aiokafka's producer does)
    reply, batch = await two_results_read(redis, keys, "big")
    # When the batch is forwarded
    acked = await forwarded(bridge, batch, refusing_big_0)
    # Then the other record was sent (a refusal at send no longer fails its batch-mates), both entries are acked,
    # and the refused one is a dead letter that says what to change
    assert sorted(acked) == sorted(e[0] for e in reply[0][1])
    assert await redis.xpending_range(keys.results, KAFKA_BRIDGE_GROUP, min="-", max="+", count=10) == []
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert (letter["id"], letter["reason"], letter["source_id"]) == ("big-0", "too_large", reply[0][1][0][0])
    assert "max.message.bytes" in letter["error"], letter["error"]


async def _append(batches: list[ResultBatch], batch: ResultBatch) -> None:
    batches.append(batch)


async def test_a_request_that_encodes_past_the_limit_is_dead_lettered_and_its_batch_published(redis: Any, keys: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn

    limit = 200
    small = request()
    # Under the limit as a record, over it once encoded with the job id and submitted_at
    big = orjson.dumps({"agent": "echo", "data": {"pad": "x" * (limit - 60)}})
    assert len(big) <= limit
    records = [RecordIn(b"job-small", small, Coordinates("t", 0, 0)), RecordIn(b"job-big" + b"-" * 40, big, Coordinates("t", 0, 1)),
               RecordIn(b"job-small-2", small, Coordinates("t", 0, 2))]
    outcome = await RequestsIn(redis, keys, max_request_bytes=limit).handle(records)
    assert outcome.published == ["job-small", "job-small-2"] and outcome.invalid == ["job-big" + "-" * 40]
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert letter["reason"] == "invalid" and "byte limit" in letter["error"] and letter["source_id"] == "0-1"


async def test_the_first_record_of_a_key_in_a_batch_is_the_job(redis: Any, keys: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn

    # Given one batch: another job for the high lane, then a key for the normal lane, then that key again (changed)
    # for the high lane; a batch is published lane by lane, in the order each lane first appears (high first here)
    records = [RecordIn(b"job-other", request(priority=9), Coordinates("t", 0, 0)),
               RecordIn(b"job-key", request(data={"n": 1}), Coordinates("t", 0, 1)),
               RecordIn(b"job-key", request(data={"n": 2}, priority=9), Coordinates("t", 0, 2))]
    outcome = await RequestsIn(redis, keys, max_request_bytes=10_000).handle(records)
    # Then the key's first record is the job, as over the gateway, and the later one a duplicate
    assert (sorted(outcome.published), outcome.duplicates) == (["job-key", "job-other"], ["job-key"])
    assert [f["id"] for _, f in await redis.xrange(keys.lane("high"))] == ["job-other"]
    (entry,) = await redis.xrange(keys.lane("normal"))
    assert entry[1]["id"] == "job-key" and orjson.loads(entry[1]["data"]) == {"n": 1}


async def test_a_recreated_topics_keyless_records_are_new_jobs_and_a_redelivery_is_not(redis: Any, keys: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn

    # Given a keyless, id-less record published, then a topic deleted and created again: its offsets start at 0 again
    # while the old jobs' records live on (STREAMCREW_JOB_TTL_S)
    requests_in = RequestsIn(redis, keys, max_request_bytes=10_000)
    first = await requests_in.handle([RecordIn(None, request(data={"n": 1}), Coordinates("t", 0, 0, 1_700_000_000_000))])
    # When the old record comes again (a redelivery) and the new topic's first record arrives at the same offset
    again = await requests_in.handle([RecordIn(None, request(data={"n": 1}), Coordinates("t", 0, 0, 1_700_000_000_000))])
    recreated = await requests_in.handle([RecordIn(None, request(data={"n": 2}), Coordinates("t", 0, 0, 1_700_000_900_000))])
    # Then the redelivery is the same job, and the new record a job of its own, run: not a duplicate of the old one
    assert first.published == ["kafka-t-0-0-1700000000000"] and again.duplicates == first.published, (first, again)
    assert recreated.published == ["kafka-t-0-0-1700000900000"] and not recreated.duplicates, recreated
    entries = await redis.xrange(keys.lane("normal"))
    assert [orjson.loads(f["data"]) for _, f in entries] == [{"n": 1}, {"n": 2}]


@pytest.mark.parametrize(("field", "value"), [
    ("attempts", "9" * 30),  # validates as an int, but orjson writes none past 64 bits
    ("error", b"bad \xff byte"),  # not UTF-8: read back as a lone surrogate, which orjson refuses
    ("id", b"job-\xff"),
])
async def test_a_result_entry_that_cannot_be_written_as_json_is_dead_lettered_and_its_batch_mates_sent(
    bridge: Any, redis: Any, keys: Any, field: str, value: str | bytes,
) -> None:
    # Given a user's raw XADD between two good result events, with a value the record's JSON cannot hold
    good = JobResult(id="job-ok", agent="echo", status=Status.COMPLETED, result={}, attempts=1).to_fields()
    await redis.xadd(keys.results, good)
    bad: dict[str, str | bytes] = {**JobResult(id="job-bad", agent="echo", status=Status.FAILED, error="x", attempts=1).to_fields(), field: value}
    await redis.xadd(keys.results, bad)  # type: ignore[arg-type]
    await redis.xadd(keys.results, {**good, "id": "job-ok-2"})
    kafka = Kafka()

    async def settled() -> bool:
        return (await redis.xpending(keys.results, KAFKA_BRIDGE_GROUP))["pending"] == 0 and len(kafka.sent) == 2

    # When the bridge's runtime reads them into the results agent
    await forward_with_runtime(bridge, kafka, settled, "the good results sent and every entry XACKed")
    # Then both good ones reached Kafka, and the bad one is a dead letter (not a batch stuck in a reclaim loop)
    assert set(kafka.sent) == {b"job-ok", b"job-ok-2"}
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert letter["reason"] == "invalid" and "malformed" in letter["error"], letter


@pytest.mark.parametrize("value", [request(), request(submitted_at=None)], ids=["absent", "null"])
async def test_submitted_at_absent_or_null_is_the_kafka_timestamp(redis: Any, keys: Any, value: bytes) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn

    # Given a record without a submitted_at of its own (the field absent, or JSON null), appended to Kafka at a known time
    record = RecordIn(b"job-when", value, Coordinates("t", 0, 0, timestamp_ms=1_600_000_000_000))
    # When the bridge publishes it
    outcome = await RequestsIn(redis, keys, max_request_bytes=10_000).handle([record])
    # Then its submitted_at is the record's Kafka timestamp, so its queue wait counts the time spent in Kafka
    assert outcome.published == ["job-when"]
    assert await redis.hget(keys.job("job-when"), "submitted_at") == "1600000000000"
    ((_, fields),) = await redis.xrange(keys.lane("normal"))
    assert fields["submitted_at"] == "1600000000000"


async def test_an_invalid_record_is_dead_lettered_once_when_its_write_is_sent_again(own_redis: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn
    from streams.keys import Keys
    from tests.support import impatient_client, stall_redis

    # Given a bridge whose Redis client gives a reply up after 0.5 s and sends the command again (the project's
    # retry policy), and a batch holding one invalid record: its dead letter is the batch's only write
    keys = Keys("kafka-once")
    client = impatient_client(own_redis.url)
    bad = [RecordIn(b"bad-once", b"not json", Coordinates("t", 2, 7))]
    await client.ping()  # connected: the write goes out on this connection, not on one the stall holds up
    # When Redis stalls 1.5 s as that write is sent: the copies sent meanwhile all run once it is back
    stall = await stall_redis(own_redis, 1500)
    outcome = await RequestsIn(client, keys, max_request_bytes=10_000).handle(bad)
    await stall
    # And Kafka delivers the batch again (its offsets were not committed: a crash, a rebalance), to another bridge
    again = await RequestsIn(client, keys, max_request_bytes=10_000).handle(bad)
    # Then the record has one dead letter, so `dead list` shows it once and a replay runs it once
    assert outcome.invalid == again.invalid == ["bad-once"]
    letters = [f for _, f in await client.xrange(keys.dead)]
    assert [(f["id"], f["source_id"]) for f in letters] == [("bad-once", "2-7")]
    await client.aclose()


async def impatient_bridge(server: Any, prefix: str) -> tuple[Any, Any, Any]:
    """A bridge (as ``build_bridge`` wires it) on ``server`` through an impatient client, its results group made."""
    from consumers.kafka_bridge.app import build_bridge
    from consumers.kafka_bridge.settings import KafkaBridgeSettings
    from streams.groups import ensure_group
    from streams.keys import Keys
    from tests.support import impatient_client

    keys, client = Keys(prefix), impatient_client(server.url)
    await ensure_group(client, keys.results, KAFKA_BRIDGE_GROUP)
    settings = KafkaBridgeSettings(redis_url=server.url, prefix=prefix, kafka_broker="kafka://127.0.0.1:9", metrics_port=0)
    return client, build_bridge(settings, client, consumer="test-bridge"), keys


async def test_a_too_large_result_is_dead_lettered_once_when_its_write_is_sent_again(own_redis: Any) -> None:
    import shutil

    from tests.support import stall_redis

    # Given a bridge whose Redis client gives a reply up after 0.5 s and sends the command again (the project's
    # retry policy), and two results read by its group, the first of which Kafka refuses as too large
    client, bridge, keys = await impatient_bridge(own_redis, "kafka-once-out")
    reply, batch = await two_results_read(client, keys, "big")
    bridge.results_out.send = refusing_big_0
    await client.ping()  # connected: the dead letter goes out on this connection, not on one the stall holds up
    # When Redis stalls 1.5 s as the dead letter is written: the copies sent meanwhile all run once it is back
    stall = await stall_redis(own_redis, 1500)
    acked = await bridge.results_out.forward(batch)
    await stall
    # And the batch is forwarded again (as by a bridge that claimed it while it was pending)
    again = await bridge.results_out.forward(batch)
    # Then both entries are acked and the refused one has one dead letter, so a replay runs it once
    assert sorted(acked) == sorted(again) == sorted(e[0] for e in reply[0][1])
    assert await client.xpending_range(keys.results, KAFKA_BRIDGE_GROUP, min="-", max="+", count=10) == []
    letters = [f for _, f in await client.xrange(keys.dead)]
    assert [(f["id"], f["reason"], f["source_id"]) for f in letters] == [("big-0", "too_large", reply[0][1][0][0])]
    await client.aclose()
    shutil.rmtree(bridge.datadir, ignore_errors=True)


async def test_a_malformed_result_is_dead_lettered_once_when_its_write_is_sent_again(own_redis: Any) -> None:
    import shutil

    from streams.outage import until_redis_answers
    from tests.support import stall_redis

    # Given a bridge whose Redis client gives a reply up after 0.5 s and sends the command again, and a malformed
    # entry (a raw XADD) read by its group: its dead letter is the read's only write
    client, bridge, keys = await impatient_bridge(own_redis, "kafka-once-reader")
    await client.xadd(keys.results, {"id": "broken", "junk": "1"})
    ((_, entries),) = await client.xreadgroup(KAFKA_BRIDGE_GROUP, "test-bridge", {keys.results: ">"}, count=10)
    reader = bridge.runtime.handler
    await client.ping()
    # When Redis stalls 1.5 s as the letter is written, the reader's call tried again until Redis answers (as the runtime does)
    stall = await stall_redis(own_redis, 1500)
    await until_redis_answers("test reader", lambda: reader.on_entries(keys.results, entries, reclaimed=False))
    await stall
    # And the entry is read again (as by a bridge that claimed it while it was pending)
    await reader.on_entries(keys.results, entries, reclaimed=True)
    # Then it is acked and has one dead letter
    assert await client.xpending_range(keys.results, KAFKA_BRIDGE_GROUP, min="-", max="+", count=10) == []
    letters = [f for _, f in await client.xrange(keys.dead)]
    assert [(f["id"], f["reason"], f["source_id"]) for f in letters] == [("broken", "invalid", entries[0][0])]
    await client.aclose()
    shutil.rmtree(bridge.datadir, ignore_errors=True)


async def refusing_big_0_wrapped(key: bytes, value: bytes) -> asyncio.Future[object]:
    """Kafka's send as faust makes it: aiokafka's too-large refusal wrapped in faust's ProducerSendError."""
    from faust.exceptions import ProducerSendError

    if key == b"big-0":
        try:
            raise MessageSizeTooLargeError("The message is 2000000 bytes when serialized which is larger than max_request_size")
        except MessageSizeTooLargeError as exc:
            raise ProducerSendError(f"Error while sending: {exc!r}") from exc
    return await refusing_big_0(key, value)


async def test_a_result_too_large_for_kafka_is_dead_lettered_when_faust_wraps_the_refusal(bridge: Any, redis: Any, keys: Any) -> None:
    # Given two result events, the first refused as too large the way faust reports it (before: pending for good)
    reply, batch = await two_results_read(redis, keys, "big")
    acked = await forwarded(bridge, batch, refusing_big_0_wrapped)
    # Then it is dead-lettered and both entries are acked, as when aiokafka's error comes bare
    assert sorted(acked) == sorted(e[0] for e in reply[0][1])
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert (letter["id"], letter["reason"]) == ("big-0", "too_large")


DEEP_WIDE = b'{"agent": "echo", "data": ' + b'{"a":' * 1000 + b"1234567890123456789012" + b"}" * 1000 + b"}"


async def test_a_record_too_deep_to_check_is_dead_lettered_and_its_batch_published(redis: Any, keys: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn

    # Given a batch with a record nested 1,000 levels around a long number (orjson reads it; the exact check cannot)
    records = [RecordIn(b"job-a", request(), Coordinates("t", 0, 0)), RecordIn(b"job-deep", DEEP_WIDE, Coordinates("t", 0, 1)),
               RecordIn(b"job-b", request(), Coordinates("t", 0, 2))]
    # When it is handled (before: the check's error crashed the agent, and faust acked the batch with nothing published)
    outcome = await RequestsIn(redis, keys, max_request_bytes=100_000).handle(records)
    # Then that record is dead-lettered with the reason, and the others are published
    assert outcome.published == ["job-a", "job-b"] and outcome.invalid == ["job-deep"], outcome
    (letter,) = [f for _, f in await redis.xrange(keys.dead)]
    assert "nested too deeply" in letter["error"], letter


async def test_a_record_without_a_kafka_timestamp_gets_the_time_it_was_read(redis: Any, keys: Any) -> None:
    from consumers.kafka_bridge.records import Coordinates
    from consumers.kafka_bridge.requests_in import RecordIn, RequestsIn
    from streams.envelope import now_ms

    # Given a record whose timestamp is Kafka's "none" (-1); before: dead-lettered, submitted_at -1 out of range
    before = now_ms()
    outcome = await RequestsIn(redis, keys, max_request_bytes=10_000).handle([RecordIn(b"job-nots", request(), Coordinates("t", 0, 0, timestamp_ms=-1))])
    assert outcome.published == ["job-nots"], outcome
    assert int(await redis.hget(keys.job("job-nots"), "submitted_at")) >= before


def test_a_result_nested_past_what_json_writes_is_a_decode_error() -> None:
    from consumers.kafka_bridge.records import result_record
    from streams.errors import DecodeError

    fields = {**JobResult(id="deep", agent="echo", status=Status.COMPLETED, attempts=1).to_fields(), "result": '{"a":' * 300 + "1" + "}" * 300}
    with pytest.raises(DecodeError, match="cannot be written as JSON"):
        result_record(fields)


def test_the_kafka_connection_log_stays_above_debug_even_at_debug() -> None:
    import logging

    from consumers.kafka_bridge.app import _quiet_libraries

    # aiokafka logs every request at DEBUG there, a SASL PLAIN authentication's password among them
    root = logging.getLogger().level
    logging.getLogger().setLevel(logging.DEBUG)
    try:
        _quiet_libraries("debug")
        assert not logging.getLogger("aiokafka.conn").isEnabledFor(logging.DEBUG)
    finally:
        logging.getLogger().setLevel(root)
        logging.getLogger("aiokafka.conn").setLevel(logging.NOTSET)
