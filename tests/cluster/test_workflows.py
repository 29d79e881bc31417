"""Workflows on a real Redis Cluster with 6 partitions (contract §9, §10): each workflow and its steps in one slot."""

from __future__ import annotations

from pathlib import Path

from redis.asyncio import Redis

from streams.keys import Keys, partition_of
from streams.producer import Producer
from streams.workflow import Workflow, step_job_id
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_until
from tests.workflows.support import check_diamonds_in_their_partitions, diamond, start_workers, wait_partitioned_results


async def test_workflows_run_to_completion_through_a_worker_and_the_gateway(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, cluster_workers: WorkerFactory, tmp_path: Path,
) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    gateways = GatewayFactory(cluster.url, cluster_prefix, tmp_path)
    try:
        gateway = await gateways.start(env={"STREAMCREW_PARTITIONS": str(PARTITIONS)})
        # Given diamond workflows from the Python producer (with ids and without), two from the gateway,
        # and one whose 0.5 s limit passes while its step sleeps
        wf_ids = [(await producer.publish_workflow(diamond(f"wf-c-{i}", i))).job_id for i in range(24)]
        wf_ids += [(await producer.publish_workflow(diamond(None, 100 + i))).job_id for i in range(6)]
        async with gateway.client() as client:
            for body in ({"id": "wf-gw"}, {}):
                posted = await client.post("/jobs", json={"agent": "workflow", "data": diamond(None, 7).to_data(), **body})
                assert posted.status_code == 202, posted.text
                wf_ids.append(posted.json()["job_id"])
            slow = Workflow("wf-c-slow", timeout_s=0.5)
            slow.step("nap", "echo", {"sleep_s": 2})
            await producer.publish_workflow(slow)
            assert {partition_of(w, PARTITIONS) for w in wf_ids} == set(range(PARTITIONS))
            # When one worker serves every partition
            start_workers(cluster_workers, 1, "--concurrency", "32")
            await wait_partitioned_results(cluster_redis, keys, PARTITIONS, len(wf_ids) * 5 + 2, timeout=45)
            # Then each workflow and step ended once in the workflow's partition, with an exact fan-in
            await check_diamonds_in_their_partitions(cluster_redis, keys, PARTITIONS, wf_ids,
                                                    others=frozenset({"wf-c-slow", step_job_id("wf-c-slow", "nap")}))
            # and the gateway finds a workflow, with its steps, and a step by id alone
            record = (await client.get(f"/jobs/{wf_ids[-1]}")).json()
            assert [s["status"] for s in record["steps"]] == ["completed"] * 4, record
            step = (await client.get(f"/jobs/{step_job_id('wf-gw', 'b')}")).json()
            assert (step["parent"], step["status"]) == ("wf-gw", "completed"), step

            async def expired() -> bool:
                return (await client.get("/jobs/wf-c-slow")).json()["status"] == "expired"

            # and the timed-out workflow expired in its partition
            await wait_until(expired, timeout=10, what="wf-c-slow expired")
    finally:
        gateways.close()
