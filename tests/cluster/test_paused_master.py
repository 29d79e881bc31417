"""A master paused for a few seconds (a frozen VM, a long fork, a stopped process) and no failover, as in production,
where the node timeout (15 s) outlasts such a pause: one worker reading every partition keeps running the other
masters' partitions meanwhile, and loses nothing of the paused one's (streams.slow_slots). A cluster of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from consumers.gateway.ratelimit import RateLimiter
from consumers.notifier.store import Store
from streams.connection import CLUSTER_SOCKET_TIMEOUT_S, connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys, partition_of
from streams.layout import layout_key
from streams.producer import Producer
from streams.runtime import Entry, GroupRuntime, Slot
from streams.scripts import Scripts
from streams.slow_slots import slow_slots_of
from streams.tenant_cap import TenantCapper, TenantCaps, running_key
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import wait_all_results
from tests.cluster_support import LocalCluster, placed_cluster
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.notifier.conftest import NotifierFactory, make_secret
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import WorkerFactory, serving, wait_for_log, wait_until

PRODUCTION_NODE_TIMEOUT_MS = 15_000  # Redis' default: a pause shorter than this is no failover
# Past the socket timeout of the calls left waiting on the paused master (a loaded CI machine runs the healthy work
# slowly) and under the node timeout: the work is done during the pause. Before, the healthy jobs took 20.6 s.
DURING_PAUSE_S = 2 * CLUSTER_SOCKET_TIMEOUT_S


@pytest.fixture
def paused_cluster() -> Iterator[LocalCluster]:
    with placed_cluster(PARTITIONS) as local:
        for port in local.alive_ports():
            with local.client(port) as node:
                node.config_set("cluster-node-timeout", PRODUCTION_NODE_TIMEOUT_MS)
                node.config_set("cluster-require-full-coverage", "no")  # the others serve while one is away (deploy/)
        yield local


async def test_a_paused_master_holds_up_only_its_own_partitions(paused_cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    parts = partition_keys(keys, PARTITIONS)
    workers = WorkerFactory(paused_cluster.listed_url(), prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)})
    redis = await connect_detected(paused_cluster.url)
    producer = Producer(redis, keys, partitions=PARTITIONS)
    paused = paused_cluster.master_of_slot(key_slot(parts[0].results.encode()))
    owners = {p: paused_cluster.master_of_slot(key_slot(parts[p].results.encode())) for p in range(PARTITIONS)}
    healthy = {p: port for p, port in owners.items() if port != paused}
    assert len(healthy) == PARTITIONS * 2 // 3, owners
    process = paused_cluster.nodes[paused]
    ids = [j for j in (f"during-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:60]
    later = [j for j in (f"later-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:30]
    retried = [j for j in (f"retried-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:8]

    def healthy_results() -> int:  # read on the healthy masters directly: a client of the paused one would wait too
        total = 0
        for p, port in healthy.items():
            with paused_cluster.client(port) as node:
                total += int(node.xlen(parts[p].results))
        return total

    try:
        # Given one worker of every partition, running jobs of all of them (the paused master's end while it is
        # paused, so their settles wait for it), and busy reading and starting a backlog of all of them
        worker = workers.start("--concurrency", "60")
        running = [JobRequest(agent="echo", data={"sleep_s": 1.5}, id=f"running-{i}") for i in range(24)]
        await producer.publish_many(running)

        async def all_running() -> bool:
            records = [await redis.hget(parts[partition_of(r.id or "", PARTITIONS)].job(r.id or ""), "status") for r in running]
            return all(status == "running" for status in records)

        await wait_until(all_running, timeout=30, what="the 24 jobs running")
        assert {partition_of(r.id or "", PARTITIONS) for r in running} >= set(owners) - set(healthy)
        before = await asyncio.to_thread(healthy_results)
        backlog = [JobRequest(agent="echo", data={"sleep_s": 0.05}, id=f"backlog-{i}") for i in range(300)]
        await producer.publish_many(backlog)
        await wait_until(lambda: asyncio.to_thread(lambda: healthy_results() >= before + 40), timeout=30,
                         what="the backlog under way")
        # When one master is paused, and jobs come to the other masters' partitions
        os.kill(process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        await producer.publish_many([JobRequest(agent="echo", data={}, id=j) for j in ids])
        # (some fail once: their retries are promoted by the upkeep, which goes round every partition)
        await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 1}, id=j) for j in retried])
        expected = before + len(ids) + len(retried) + sum(1 for r in [*running, *backlog] if partition_of(r.id or "", PARTITIONS) in healthy)

        async def ran() -> bool:
            return await asyncio.to_thread(healthy_results) >= expected

        # Then they are run while it is paused, and the rest of the backlog of those partitions
        await wait_until(ran, timeout=DURING_PAUSE_S,
                         what=f"the {len(ids)} jobs, {len(retried)} retried ones and the backlog of the healthy partitions while a master is paused")
        print(f"healthy partitions' jobs done {time.monotonic() - paused_at:.1f} s into the pause")
        # And so are those that come once the calls left waiting on it have timed out (the client then refreshes its map)
        await asyncio.sleep(max(0.0, paused_at + CLUSTER_SOCKET_TIMEOUT_S + 1 - time.monotonic()))  # the pause's length
        await producer.publish_many([JobRequest(agent="echo", data={}, id=j) for j in later])
        expected += len(later)
        waves_at = time.monotonic()
        await wait_until(ran, timeout=4.0, what=f"the {len(later)} jobs sent {waves_at - paused_at:.1f} s into the pause")
        print(f"and those sent {waves_at - paused_at:.1f} s into it, {time.monotonic() - waves_at:.1f} s later")
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        os.kill(process.pid, signal.SIGCONT)
    try:
        # And once it is back, every job has exactly one result: the paused master's settles were written, once
        results = await wait_all_results(redis, keys, len(running) + len(backlog) + len(ids) + len(retried) + len(later), timeout=60)
        counts = Counter(r.id for r in results)
        assert set(counts) == {r.id for r in [*running, *backlog]} | set(ids) | set(retried) | set(later)
        assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1]
        assert worker.alive(), worker.log_text()[-3000:]
    finally:
        workers.close()
        await redis.aclose()


class PausingOnStart:
    """An entry handler that, like the worker's, makes a call on the entries' master before it starts them (start.lua);
    the first entries of ``target`` pause that master first: a master that hangs between a read and its start."""

    def __init__(self, runtime: GroupRuntime, target: str, pause: Callable[[], None]) -> None:
        self.runtime = runtime
        self.target = target
        self.pause = pause
        self.paused = False
        self.started: Counter[str] = Counter()
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        if stream == self.target and not self.paused:
            self.paused = True
            self.pause()
        await self.runtime.redis.xlen(stream)  # the start's call on the stream's master
        self.started[stream] += len(entries)
        for eid, _ in entries:
            asyncio.get_running_loop().call_soon(self.runtime.release, stream, eid)

    async def hand_back(self, slots: list[Slot]) -> int:
        return 0

    async def tick(self) -> None:
        pass

    async def taken_over(self, slots: list[Slot]) -> None:
        pass


async def test_a_master_paused_between_a_read_and_its_start_holds_up_only_its_own_partitions(paused_cluster: LocalCluster) -> None:
    parts = partition_keys(Keys(f"c{uuid.uuid4().hex[:12]}"), PARTITIONS)
    lanes = [p.lane("normal") for p in parts]
    redis = await connect_detected(paused_cluster.url)
    paused = paused_cluster.master_of_slot(key_slot(lanes[0].encode()))
    healthy = [lane for lane in lanes if paused_cluster.master_of_slot(key_slot(lane.encode())) != paused]
    process = paused_cluster.nodes[paused]
    # Given 20 entries in each partition's lane, and a consumer of all of them whose read of partition 0 is followed by
    # its master pausing, before the start's call
    for lane in lanes:
        await redis.xgroup_create(lane, "workers", id="0", mkstream=True)
        for i in range(20):
            await redis.xadd(lane, {"n": str(i)})
    runtime = GroupRuntime(redis, streams=lanes, level_size=PARTITIONS, group="workers", consumer="me", concurrency=200,
                           lease_s=60, block_ms=100)
    paused_at: list[float] = []

    def pause() -> None:
        os.kill(process.pid, signal.SIGSTOP)
        paused_at.append(time.monotonic())

    handler = PausingOnStart(runtime, lanes[0], pause)
    try:
        async with serving(runtime):
            try:
                # When it reads on
                # Then the other masters' partitions are started while that master is paused (the read loop waited for
                # that start before, until the master answered)
                await wait_until(lambda: bool(paused_at), timeout=30, what="partition 0 read")
                await wait_until(lambda: all(handler.started[lane] == 20 for lane in healthy), timeout=DURING_PAUSE_S,
                                 what=f"the healthy partitions' entries started while a master is paused: {dict(handler.started)}")
                print(f"healthy partitions started {time.monotonic() - paused_at[0]:.1f} s into the pause")
            finally:
                os.kill(process.pid, signal.SIGCONT)  # before the runtime stops: it waits for the start left running
            # And once it is back, its partitions' entries are started too, partition 0's by the start left waiting
            await wait_until(lambda: all(handler.started[lane] == 20 for lane in lanes), timeout=30,
                             what=f"every partition's entries started: {dict(handler.started)}")
    finally:
        os.kill(process.pid, signal.SIGCONT)
        await redis.aclose()


async def test_a_paused_master_holds_up_only_its_own_partitions_webhook_retries(
    paused_cluster: LocalCluster, tmp_path: Path,
) -> None:
    receiver = Receiver().start()
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    parts = partition_keys(keys, PARTITIONS)
    on_cluster = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}
    workers = WorkerFactory(paused_cluster.listed_url(), prefix, tmp_path, env=on_cluster)
    notifiers = NotifierFactory(paused_cluster.listed_url(), prefix, tmp_path, make_secret())
    redis = await connect_detected(paused_cluster.url)
    producer = Producer(redis, keys, partitions=PARTITIONS)
    paused = paused_cluster.master_of_slot(key_slot(parts[0].results.encode()))  # partition 0's: the first promoted
    healthy = {p for p in range(PARTITIONS) if paused_cluster.master_of_slot(key_slot(parts[p].results.encode())) != paused}
    process = paused_cluster.nodes[paused]
    ids = [j for j in (f"hook-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:20]
    for job_id in ids:  # each job's first delivery fails: its retry waits in its partition's delayed set
        receiver.script(f"/hook/{job_id}", [Reply(500)])

    def delivered() -> set[str]:
        return {r.path.rsplit("/", 1)[1] for r in receiver.requests if r.path.startswith("/hook/")
                and len(receiver.on(r.path)) >= 2}

    try:
        # Given a worker and a notifier of every partition, the notifier retrying a failed delivery 0.2 s later
        workers.start("--concurrency", "50")
        notifier = notifiers.start("--backoff", "0.2", "--lease", "30", env=on_cluster)
        # (under way before the pause: a process's start checks every partition's groups, and waits for a paused master)
        warm = [f"warm-{p}" for p in range(PARTITIONS)]
        await producer.publish_many([JobRequest(agent="echo", data={}, id=j, webhook=receiver.url("/warm")) for j in warm])
        await wait_until(lambda: len(receiver.on("/warm")) >= len(warm), timeout=30, what="the first webhooks")
        # When partition 0's master is paused, and jobs of the other masters' partitions end with a webhook that
        # fails once
        os.kill(process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        await producer.publish_many([JobRequest(agent="echo", data={}, id=j, webhook=receiver.url(f"/hook/{j}")) for j in ids])
        # Then their retries are promoted and delivered while it is paused (the promotion waited on partition 0 first)
        await wait_until(lambda: delivered() >= set(ids), timeout=DURING_PAUSE_S,
                         what=f"the {len(ids)} webhooks of the healthy partitions retried while a master is paused: {sorted(delivered())}")
        print(f"healthy partitions' webhook retries delivered {time.monotonic() - paused_at:.1f} s into the pause")
        assert notifier.alive(), notifier.log_text()[-3000:]
    finally:
        await _resume_and_close(process, workers, notifiers, receiver, redis)


@pytest.mark.parametrize("owner", ["worker", "notifier", "gateway"])
async def test_a_scripts_first_call_on_a_master_does_not_wait_for_another_that_is_paused(paused_cluster: LocalCluster, owner: str) -> None:
    keys = Keys(f"c{uuid.uuid4().hex[:12]}")
    parts = partition_keys(keys, PARTITIONS)
    paused = paused_cluster.master_of_slot(key_slot(parts[0].results.encode()))
    p = next(p for p in range(PARTITIONS) if paused_cluster.master_of_slot(key_slot(parts[p].results.encode())) != paused)
    bucket = next(b for b in (f"tenant-{i}" for i in range(100)) if paused_cluster.master_of_slot(key_slot(keys.ratelimit(b).encode())) != paused)
    redis = await connect_detected(paused_cluster.listed_url())
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "worker": lambda: Scripts(redis).promote(keys=[parts[p].delayed, parts[p].slot_guard],
                                                 args=[10, parts[p].job_prefix, parts[p].lane_prefix]),
        "notifier": lambda: Store(redis, parts[p]).promote(),
        "gateway": lambda: RateLimiter(redis, keys, rate_per_s=10, burst=10).take(bucket),
    }
    process = paused_cluster.nodes[paused]
    try:
        # Given masters that know none of the scripts (a new shard, a promoted replica), and one master paused
        for port in paused_cluster.alive_ports():
            with paused_cluster.client(port) as node:
                if port != paused:
                    node.script_flush()
        await redis.ping(target_nodes=RedisCluster.ALL_NODES)  # every node's connection made while all answer
        os.kill(process.pid, signal.SIGSTOP)
        # When a script is first called on another master
        # Then it is loaded there and answers, not after the paused one's socket timeout (redis-py loads it on every master)
        started = time.monotonic()
        await asyncio.wait_for(calls[owner](), timeout=CLUSTER_SOCKET_TIMEOUT_S / 2)
        print(f"{owner}'s script answered in {time.monotonic() - started:.3f} s")
    finally:
        os.kill(process.pid, signal.SIGCONT)
        await redis.aclose()


async def test_the_tenant_caps_upkeep_does_not_wait_for_a_paused_master(paused_cluster: LocalCluster) -> None:
    parts = partition_keys(Keys(f"c{uuid.uuid4().hex[:12]}"), PARTITIONS)
    redis = await connect_detected(paused_cluster.listed_url())
    home = paused_cluster.master_of_slot(key_slot(parts[0].slot_guard.encode()))  # where workers compare their caps
    other = next(p for p in parts if paused_cluster.master_of_slot(key_slot(p.slot_guard.encode())) != home)
    capper = TenantCapper(Scripts(redis), TenantCaps(default=5), partitions=PARTITIONS, lease_s=60, worker="me", home=parts[0],
                          slow=slow_slots_of(redis))
    process = paused_cluster.nodes[home]
    try:
        try:
            # Given a worker running capped jobs in partition 0 and in a partition of another master, and partition 0's
            # master paused
            for keys, job in ((parts[0], "job-0"), (other, "job-1")):
                await redis.zadd(running_key(keys, "acme"), {job: 1})
            os.kill(process.pid, signal.SIGSTOP)
            # When it compares its caps with the other workers' (in partition 0), and renews its jobs' slots
            # Then neither waits for the paused master's socket timeout (the worker's upkeep runs after them: the other
            # partitions' retries waited), and the other partition's slot is renewed
            await asyncio.wait_for(capper.agree(), timeout=CLUSTER_SOCKET_TIMEOUT_S / 2)
            await asyncio.wait_for(capper.renew([(parts[0], "acme", "job-0"), (other, "acme", "job-1")]),
                                   timeout=CLUSTER_SOCKET_TIMEOUT_S / 2)
            assert await redis.zscore(running_key(other, "acme"), "job-1") > 1
        finally:
            os.kill(process.pid, signal.SIGCONT)
        # And once it is back, the call left running ends there: partition 0's slot is renewed too
        await wait_until(lambda: _renewed(redis, running_key(parts[0], "acme"), "job-0"), timeout=30, what="partition 0's renewal")
    finally:
        await redis.aclose()


async def _renewed(redis: Any, key: str, job: str) -> bool:
    return (await redis.zscore(key, job) or 0) > 1


async def test_a_paused_master_holds_up_only_its_own_partitions_submissions(paused_cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    parts = partition_keys(keys, PARTITIONS)
    on_cluster = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}
    gateways = GatewayFactory(paused_cluster.listed_url(), prefix, tmp_path)
    paused = paused_cluster.master_of_slot(key_slot(parts[0].results.encode()))
    healthy = {p for p in range(PARTITIONS) if paused_cluster.master_of_slot(key_slot(parts[p].results.encode())) != paused}
    process = paused_cluster.nodes[paused]
    stuck_id = next(j for j in (f"stuck-{i}" for i in range(300)) if partition_of(j, PARTITIONS) not in healthy)
    ids = [j for j in (f"sent-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:10]
    try:
        # Given a gateway that has taken jobs of every partition
        gateway = await gateways.start(on_cluster)
        async with gateway.client() as client:
            warm = await asyncio.gather(*(client.post("/jobs", json={"agent": "echo", "data": {}, "id": f"warm-{i}"}) for i in range(30)))
            assert {r.status_code for r in warm} == {202}, [r.text for r in warm]
            # When partition 0's master is paused and a job of its partitions is submitted (its answer waits for it)
            os.kill(process.pid, signal.SIGSTOP)
            stuck = asyncio.create_task(client.post("/jobs", json={"agent": "echo", "data": {}, "id": stuck_id}))
            await asyncio.to_thread(wait_for_log, gateway.child, "has not answered for", timeout=10)
            # Then jobs without an id, and jobs of the other masters' partitions, are still taken at once, while it is paused
            sent_at = time.monotonic()
            answers = await asyncio.wait_for(asyncio.gather(
                *(client.post("/jobs", json={"agent": "echo", "data": {"i": i}}) for i in range(30)),
                *(client.post("/jobs", json={"agent": "echo", "data": {}, "id": j}) for j in ids)), timeout=DURING_PAUSE_S / 2)
            print(f"{len(answers)} submissions answered {time.monotonic() - sent_at:.2f} s after they were sent, during the pause")
            assert [r.status_code for r in answers] == [202] * len(answers), [r.text for r in answers if r.status_code != 202]
            assert not stuck.done(), "the paused master's job was answered during the pause"
            # (the id-less ones went to the partitions of the masters that answer)
            placed = [partition_of(r.json()["job_id"], PARTITIONS) for r in answers[:30]]
            assert set(placed) <= healthy, placed
            os.kill(process.pid, signal.SIGCONT)
            # And the one that waited is answered once its master is back
            assert (await stuck).status_code in (202, 503)
        redis = await connect_detected(paused_cluster.listed_url())
        try:
            for r in answers:
                job_id = r.json()["job_id"]
                assert await redis.exists(parts[partition_of(job_id, PARTITIONS)].job(job_id)), job_id
        finally:
            await redis.aclose()
    finally:
        os.kill(process.pid, signal.SIGCONT)
        gateways.close()


STARTED_WITHIN_S = 40.0  # two process starts (1.7 – 2.7 s here, all done) on a loaded machine; the failover comes at 60 s


@pytest.mark.parametrize("layout_there", [False, True], ids=["layout-elsewhere", "layout-on-the-paused-master"])
async def test_processes_started_while_a_master_is_paused_serve_the_other_partitions(
    paused_cluster: LocalCluster, tmp_path: Path, layout_there: bool,
) -> None:
    # the cluster client's default node (redis-py's pick: its first command table, keyless calls such as a start's
    # version check): a start once waited for it
    plain = RedisCluster(host="127.0.0.1", port=paused_cluster.ports[0])
    await plain.initialize()
    paused = plain.get_default_node().port
    await plain.aclose()
    # The prefix's layout record (<prefix>:partitions, checked at every start) on the paused master or on another: when
    # there, a replica of it that holds the same N lets a start go on (before, every start waited for the master)
    prefix = next(p for p in (f"c{uuid.uuid4().hex[:12]}" for _ in range(300))
                  if (paused_cluster.master_of_slot(key_slot(layout_key(Keys(p)).encode())) == paused) == layout_there)
    keys = Keys(prefix)
    parts = partition_keys(keys, PARTITIONS)
    healthy = {p for p in range(PARTITIONS) if paused_cluster.master_of_slot(key_slot(parts[p].results.encode())) != paused}
    ids = [j for j in (f"new-{i}" for i in range(300)) if partition_of(j, PARTITIONS) in healthy][:20]
    on_cluster = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}
    workers = WorkerFactory(paused_cluster.listed_url(), prefix, tmp_path, env=on_cluster)
    notifiers = NotifierFactory(paused_cluster.listed_url(), prefix, tmp_path, make_secret())
    receiver = Receiver().start()
    redis = await connect_detected(paused_cluster.listed_url())
    producer = Producer(redis, keys, partitions=PARTITIONS)
    process = paused_cluster.nodes[paused]
    for port in paused_cluster.alive_ports():
        with paused_cluster.client(port) as node:
            node.config_set("cluster-node-timeout", 60_000)  # no failover during this test's pause, however slow the starts
    try:
        await producer.ensure_groups()  # a prefix in use: its layout recorded, every partition's groups made
        # (as in a cluster past its first seconds: CLUSTER SLOTS leaves a replica out until the other nodes have heard,
        # by gossip, of its replication offset moving past 0, which this new cluster's first writes just did)
        await wait_until(lambda: _replicas_listed(paused_cluster, paused), timeout=30,
                         what="every node's CLUSTER SLOTS to list the replicas of every master")
        # Given that master paused
        os.kill(process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        # When a worker and a notifier of every partition start
        workers.start("--concurrency", "20", wait_ready=False)
        await asyncio.to_thread(notifiers.start, env=on_cluster)
        await producer.publish_many([JobRequest(agent="echo", data={}, id=j, webhook=receiver.url(f"/hook/{j}")) for j in ids])
        # Then they run and deliver the other masters' partitions' jobs while it is paused, well before a failover
        # (their starts waited for it: 75 s, the failover's)
        started_s = time.monotonic() - paused_at
        assert started_s < STARTED_WITHIN_S, f"the notifier was ready {started_s:.1f} s into the pause"
        await wait_until(lambda: {r.path.rsplit("/", 1)[1] for r in receiver.requests} >= set(ids), timeout=STARTED_WITHIN_S - started_s,
                         what=f"the {len(ids)} webhooks of jobs of the healthy partitions, from processes started during the pause")
        print(f"processes started during the pause delivered {time.monotonic() - paused_at:.1f} s into it")
    finally:
        await _resume_and_close(process, workers, notifiers, receiver, redis)


def _replicas_listed(cluster: LocalCluster, paused: int) -> bool:
    """Whether every node but ``paused`` lists a replica beside each master in CLUSTER SLOTS."""
    for port in cluster.alive_ports():
        if port != paused:
            with cluster.client(port) as node:
                if any(len(slots) < 4 for slots in node.execute_command("CLUSTER", "SLOTS")):  # start, end, master, replicas...
                    return False
    return True


async def _resume_and_close(process: Any, workers: WorkerFactory, notifiers: NotifierFactory, receiver: Receiver, redis: Any) -> None:
    """The paused master resumed first (a process stopping waits for its calls there), then what the test started."""
    os.kill(process.pid, signal.SIGCONT)
    workers.close()
    notifiers.close()
    receiver.stop()
    await redis.aclose()
