"""Workflows with STREAMCREW_PARTITIONS=4 on one real Redis (contract §10): a workflow and its steps stay in one partition."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.dead import list_dead, replay
from streams.job_ids import is_generated_id
from streams.keys import Keys, partition_of
from streams.producer import Producer
from streams.records import get_job
from streams.workflow import Workflow, step_job_id
from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.consumers.test_cli import cli
from tests.support import WorkerFactory, wait_until
from tests.workflows.support import (
    check_diamonds_in_their_partitions,
    diamond,
    start_workers,
    wait_partitioned_results,
)

PARTITIONS = 4
ENV = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}


@pytest.fixture
def workers4(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(redis_url, prefix, tmp_path, env=ENV)
    yield factory
    factory.close()


@pytest.fixture
def producer4(redis, keys: Keys) -> Producer:  # type: ignore[no-untyped-def]
    return Producer(redis, keys, partitions=PARTITIONS)


def one_id_per_partition(stem: str) -> list[str]:
    """Ids ``<stem>-<n>``, the first found in each partition, in partition order."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < PARTITIONS:
        found.setdefault(partition_of(f"{stem}-{n}", PARTITIONS), f"{stem}-{n}")
        n += 1
    return [found[p] for p in range(PARTITIONS)]


@pytest.mark.parametrize("partitions", [4, 6, 16])
def test_a_step_id_lands_in_its_workflow_partition_and_is_no_generated_id(partitions: int) -> None:
    workflow_ids = ["wf-42", "order:17", "a:", "a::b", "::", "1733000000000-7", *(f"{lane}1733000000000-7:{p}" for lane in ("", "normal:") for p in range(partitions))]
    for wid in workflow_ids:
        for sid in ("a", "7", "step.a_2", "x-y"):
            assert partition_of(step_job_id(wid, sid), partitions) == partition_of(wid, partitions), (wid, sid)
            assert not is_generated_id(step_job_id(wid, sid))
    assert partition_of("1733000000000-7:3", partitions) == 3  # generated ids still name their partition
    assert step_job_id("wf-42", "pricing") == "wf-42::pricing"


async def test_many_workflows_complete_with_every_step_in_their_partition(redis, keys: Keys, producer4: Producer, workers4: WorkerFactory) -> None:
    # Given a raw XADD of an id-less workflow into partition 1 whose generated id another entry's record holds
    squatted = keys.in_partition(1)
    await redis.hset(squatted.job("5-0:1"), mapping={"status": "queued", "source": "low/4-0"})
    await redis.xadd(squatted.lane("normal"), {"agent": "workflow", "data": json.dumps(diamond(None, 999).to_data())}, id="5-0")
    # and 48 diamond workflows with ids and 16 without, in two lanes, queued before two workers start
    named = [await producer4.publish_workflow(diamond(f"wf-p-{i}", i), priority="high" if i % 3 == 0 else None) for i in range(48)]
    idless = [await producer4.publish_workflow(diamond(None, 100 + i), priority="low" if i % 2 else None) for i in range(16)]
    wf_ids = [p.job_id for p in named + idless] + ["normal:5-0:1"]  # the raw one, renamed as publish.lua would
    assert all(p.created for p in named + idless)
    assert {partition_of(w, PARTITIONS) for w in wf_ids} == set(range(PARTITIONS))
    assert all(re.fullmatch(r"\d+-\d+:\d", p.job_id) for p in idless), [p.job_id for p in idless]  # the id names its partition
    # When they run
    start_workers(workers4, 2, "--concurrency", "16")
    await wait_partitioned_results(redis, keys, PARTITIONS, len(wf_ids) * 5, timeout=90)
    # Then each workflow and step ended once, completed, in the workflow's partition; the fan-in is exact
    await check_diamonds_in_their_partitions(redis, keys, PARTITIONS, wf_ids)
    # and every job record and workflow state the run left is in the partition its id names
    tagged = re.compile(rf"^{re.escape(keys.prefix)}:\{{(\d+)\}}:(job|wf):(.+)$")
    homes = []
    async for key in redis.scan_iter(match=f"{keys.prefix}:*", count=1000):
        if m := tagged.match(key):
            homes.append((m[3], int(m[1])))
    assert len(homes) >= len(wf_ids) * 6  # a record per workflow and step, a state hash per workflow
    assert [(i, p) for i, p in homes if partition_of(i, PARTITIONS) != p] == []
    assert not [k async for k in redis.scan_iter(match=f"{keys.prefix}:job:*")]  # nothing unpartitioned


async def test_workflows_expire_in_every_partition(redis, keys: Keys, producer4: Producer, workers4: WorkerFactory) -> None:
    # Given one workflow per partition whose 0.5 s limit passes while its first step sleeps
    wf_ids = one_id_per_partition("wf-exp")
    for wid in wf_ids:
        wf = Workflow(wid, timeout_s=0.5)
        wf.step("nap", "echo", {"sleep_s": 2})
        wf.step("after_nap", "echo", {}, after=["nap"])
        await producer4.publish_workflow(wf)
    start_workers(workers4, 1, "--concurrency", "8")
    # When their limits pass, then each ends expired in its own partition, dead-lettered there, its timeout entry gone
    got = await wait_partitioned_results(redis, keys, PARTITIONS, 2 * PARTITIONS, timeout=30)  # 4 workflows, 4 naps
    ended = {r.id: (p, r) for p, r in got if r.agent == "workflow"}
    assert set(ended) == set(wf_ids)
    for p, wid in enumerate(wf_ids):
        where, event = ended[wid]
        assert (where, event.status) == (p, "expired"), (wid, event)
        assert event.result["steps"]["after_nap"]["status"] == "skipped"
        part = keys.in_partition(p)
        assert [(d.id, d.reason) for d in await list_dead(redis, part) if d.agent == "workflow"] == [(wid, "expired")]
        assert await redis.zcard(part.workflow_timeouts) == 0
    assert not await redis.exists(keys.workflow_timeouts)


async def test_an_idless_workflow_replayed_from_its_partition_resumes_there(redis, keys: Keys, producer4: Producer, workers4: WorkerFactory) -> None:
    # Given an id-less workflow whose middle step fails its only attempt
    wf = Workflow()
    wf.step("first", "echo", {"n": 1})
    wf.step("flaky", "echo", {"fail_first": 1}, after=["first"], max_attempts=1)
    wf.step("last", "echo", {"n": 3}, after=["flaky"])
    wid = (await producer4.publish_workflow(wf)).job_id
    part = keys.in_partition(partition_of(wid, PARTITIONS))
    start_workers(workers4, 1, "--concurrency", "4")

    async def ended(n: int) -> bool:
        return sum(1 for _, f in await redis.xrange(part.results) if f.get("id") == wid) >= n

    await wait_until(lambda: ended(1), timeout=30, what=f"workflow {wid} failed")
    record = await get_job(redis, keys, wid, partitions=PARTITIONS)
    assert record is not None and record.status == "failed"
    # When its dead letter is replayed from its partition
    (letter,) = [d for d in await list_dead(redis, part) if d.id == wid]
    assert letter.entry_id is not None and (await replay(redis, part, letter.entry_id)).job_id == wid
    # Then only the failed step and its dependent run again, and the workflow completes where it was
    await wait_until(lambda: ended(2), timeout=30, what=f"workflow {wid} replayed")
    record = await get_job(redis, keys, wid, partitions=PARTITIONS)
    assert record is not None and record.status == "completed", record
    ids = [f.get("id") for _, f in await redis.xrange(part.results)]
    assert ids.count(step_job_id(wid, "first")) == 1 and ids.count(step_job_id(wid, "flaky")) == 2


async def test_gateway_and_cli_run_workflows_over_partitions(
    gateways: GatewayFactory, workers4: WorkerFactory, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = await gateways.start(env=ENV)
    start_workers(workers4, 1, "--concurrency", "8")
    graph = diamond(None, 7).to_data()
    async with gateway.client() as client:
        # Given a workflow posted with an id and one without
        named = await client.post("/jobs", json={"agent": "workflow", "data": graph, "id": "wf-gw"})
        idless = await client.post("/jobs", json={"agent": "workflow", "data": graph})
        assert named.status_code == idless.status_code == 202, (named.text, idless.text)
        wf_ids = ["wf-gw", idless.json()["job_id"]]
        assert re.fullmatch(r"\d+-\d+:\d", wf_ids[1]), wf_ids

        async def both_done() -> bool:
            return [(await client.get(f"/jobs/{w}")).json()["status"] for w in wf_ids] == ["completed"] * 2

        await wait_until(both_done, timeout=60, what=f"workflows {wf_ids} completed")
        # Then each is found by its id alone with its steps, and so is each step
        for wid in wf_ids:
            record = (await client.get(f"/jobs/{wid}")).json()
            assert [(s["id"], s["status"], s["job_id"]) for s in record["steps"]] == [(s, "completed", step_job_id(wid, s)) for s in "abcd"]
            step = (await client.get(f"/jobs/{step_job_id(wid, 'd')}")).json()
            assert (step["parent"], step["step"], step["status"]) == (wid, "d", "completed"), step
            result = (await client.get(f"/jobs/{wid}/result")).json()
            assert result["result"]["summary"] == "4 of 4 steps completed"
            async with sse_events(client, f"/jobs/{wid}/events") as events:
                last = await anext(events)
            assert (last["id"], json.loads(last["data"])["status"]) == ("1-completed-4", "completed"), last
    # and the CLI follows a workflow's steps by id with partitions too
    monkeypatch.setenv("STREAMCREW_PARTITIONS", str(PARTITIONS))
    done = cli(redis_url, prefix, "submit", "workflow", "--data", json.dumps(graph), "--id", "wf-cli4", "--wait", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert any(line.startswith("4/4") for line in done.stderr.splitlines()), done.stderr

