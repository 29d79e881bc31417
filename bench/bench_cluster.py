"""Work spread over a real 3-master Redis Cluster with 6 partitions, against one instance, same run.

    .venv/bin/python -m bench.bench_cluster [--jobs 30000] [--concurrency N] [--rounds 3] [--single-replica]

For each side: publish ``--jobs`` no-op jobs, let one worker (default settings unless
``--concurrency`` is given) run them, and read each Redis node's
``INFO cpu`` (used_cpu_user + used_cpu_sys) before and after. Prints the Redis CPU per job (µs/job:
the input of the sizing model in bench/README.md) of the single instance, the masters and the
replicas, the busiest master's CPU as a share of the single instance's (target <= 0.45), the same
share on a second cluster of three masters without replicas (like for like: the single instance feeds
no replica either) and the worker's jobs/s on both. ``--single-replica`` also runs the single instance with a replica attached,
which isolates what feeding a replica costs a master. Needs redis-server
and redis-cli on PATH (the cluster comes from tests/cluster_support.py, as in the test suite); the first
line names the server they are, since the figure depends on it (bench/README.md: 0.46 - 0.52 on Redis 7.0.15,
0.40 - 0.43 on Redis 8.0.2 and Valkey 8.0.1). To measure another build, put its directory first on PATH;
``PATH="$(bench/redis8.sh):$PATH"`` measures Redis 8.0, the server deploy/ runs, on a Debian whose own is older.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis as sync_redis

from bench.common import bench_redis, new_prefix
from consumers.processes import Child, streamcrew_cmd
from consumers.settings import WorkerSettings
from streams.connection import connect_detected
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from tests.cluster_support import LocalCluster, cluster_binaries
from tests.support import wait_for_log

PARTITIONS = 6
REPLICA_SYNC_TIMEOUT_S = 30.0


def per_job_us(cpu_s: float, jobs: int) -> float:
    """Redis CPU per job in µs: the input of the sizing model in bench/README.md."""
    return cpu_s / jobs * 1e6


@contextlib.contextmanager
def replica_of(binary: str, port: int) -> Iterator[None]:
    """A replica of the instance on ``port`` for the block: its master then feeds a replica, as a cluster master does."""
    replica = RedisServer(binary).start()
    try:
        with sync_redis.Redis(host="127.0.0.1", port=port) as master:
            master.config_set("repl-diskless-sync-delay", 0)  # sync at once, not after Redis' default 5 s
        with sync_redis.Redis(host="127.0.0.1", port=replica.port, decode_responses=True) as c:
            c.replicaof("127.0.0.1", port)
            deadline = time.monotonic() + REPLICA_SYNC_TIMEOUT_S
            while c.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise SystemExit(f"the replica did not sync with port {port} within {REPLICA_SYNC_TIMEOUT_S}s")
                time.sleep(0.05)
        yield
    finally:
        replica.close()


def server_label(port: int) -> str:
    """The server's name and version (Valkey reports a Redis-compatible redis_version beside its own)."""
    with sync_redis.Redis(host="127.0.0.1", port=port, decode_responses=True) as c:
        info = c.info("server")
    name = str(info.get("server_name") or "redis")
    version = info.get(f"{name}_version") or info.get("redis_version")
    return f"{name.capitalize()} {version}"


def redis_cpu(port: int) -> float:
    with sync_redis.Redis(host="127.0.0.1", port=port) as c:
        info = c.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def publish(url: str, prefix: str, n: int, partitions: int) -> None:
    redis = await connect_detected(url)
    producer = Producer(redis, Keys(prefix), partitions=partitions)
    await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(n)])
    await redis.aclose()


def results_counter(url: str, prefix: str, partitions: int) -> tuple[sync_redis.Redis | sync_redis.RedisCluster, list[str]]:
    """One client kept for the whole wait (a new cluster client per poll would load the first node)."""
    client = sync_redis.RedisCluster.from_url(url) if partitions > 1 else sync_redis.Redis.from_url(url)
    return client, [k.results for k in partition_keys(Keys(prefix), partitions)]


def run_side(
    url: str, ports: list[int], n: int, concurrency: int | None, partitions: int, log_dir: Path, *, replica_acks: int = 0,
) -> tuple[dict[int, float], float]:
    """Redis CPU seconds per port (publish and work) and the worker's jobs/s.

    The worker starts first and the CPU is read once it is ready: its Python start-up (~3 s of imports)
    does no Redis work, but six cluster nodes idling through it (gossip, cron: ~2 ms of CPU a second
    each) would add ~3 % to a master's figure and little to the single instance's.
    """
    prefix = new_prefix(f"cluster{partitions}")
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0",
           "STREAMCREW_PARTITIONS": str(partitions), "STREAMCREW_REPLICA_ACKS": str(replica_acks)}
    flags = [] if concurrency is None else ["--concurrency", str(concurrency)]  # None: the worker's default, as users run it
    child = Child(streamcrew_cmd("worker", *flags), env=env,
                  log_path=log_dir / f"{prefix}.log")
    client, results = results_counter(url, prefix, partitions)
    try:
        wait_for_log(child, " ready: ")
        before = {p: redis_cpu(p) for p in ports}
        asyncio.run(publish(url, prefix, n, partitions))
        t0 = time.monotonic()
        deadline = t0 + 600
        first = None
        while (done := sum(int(client.xlen(k)) for k in results)) < n:
            if first is None and done > 0:
                first = (time.monotonic(), done)
            if not child.alive():
                raise SystemExit(f"worker died:\n{child.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {done} of {n} results")
            time.sleep(0.2)
        t1 = time.monotonic()
        after = {p: redis_cpu(p) for p in ports}
    finally:
        child.stop()
        client.close()
    start, done0 = first or (t0, 0)
    return {p: after[p] - before[p] for p in ports}, (n - done0) / max(1e-9, t1 - start)


def median_round(ratios: list[float]) -> int:
    return sorted(range(len(ratios)), key=lambda i: ratios[i])[len(ratios) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--concurrency", type=int, default=None,
                        help=f"the worker's slots (default: the worker's own default, {WorkerSettings.model_fields['concurrency'].default})")
    parser.add_argument("--rounds", type=int, default=3, help="single and cluster runs, alternated; the median ratio is the figure")
    parser.add_argument("--single-replica", action="store_true",
                        help="also run the single instance with a replica attached: the replication feed's share of the cluster's cost")
    args = parser.parse_args()
    binaries = cluster_binaries()
    if binaries is None:
        raise SystemExit("needs redis-server and redis-cli on PATH")
    rounds: list[tuple[dict[int, float], float, dict[int, float], float, dict[int, float]]] = []
    with bench_redis(None) as single_url, tempfile.TemporaryDirectory() as tmp:
        single_port = int(single_url.rsplit(":", 1)[1].split("/")[0])
        print(f"server: {server_label(single_port)} ({binaries[0]}), single instance and every cluster node", flush=True)
        cluster = LocalCluster(*binaries).start()
        bare = LocalCluster(*binaries, size=3, replicas=0).start()  # the same three masters' work, no replica to feed
        try:
            for c in (cluster, bare):
                c.place([str(p) for p in range(PARTITIONS)])
            masters = sorted(cluster.masters())
            replicas = sorted(set(cluster.alive_ports()) - set(masters))
            bare_masters = sorted(bare.masters())
            for _ in range(args.rounds):
                single_cpu, single_rate = run_side(single_url, [single_port], args.jobs, args.concurrency, 1, Path(tmp))
                cluster_cpu, cluster_rate = run_side(cluster.url, masters + replicas, args.jobs, args.concurrency, PARTITIONS, Path(tmp))
                bare_cpu, _ = run_side(bare.url, bare_masters, args.jobs, args.concurrency, PARTITIONS, Path(tmp))
                rounds.append((single_cpu, single_rate, cluster_cpu, cluster_rate, bare_cpu))
            replicated_cpu: dict[int, float] = {}
            if args.single_replica:  # last: once a replica has attached, the instance keeps feeding its backlog
                with replica_of(binaries[0], single_port):
                    replicated_cpu, _ = run_side(single_url, [single_port], args.jobs, args.concurrency, 1, Path(tmp))
            _, acked_rate = run_side(cluster.url, masters, args.jobs, args.concurrency, PARTITIONS, Path(tmp), replica_acks=1)
        finally:
            cluster.close()
            bare.close()
    ratios = [max(c[p] for p in masters) / s[single_port] for s, _, c, _, _ in rounds]
    bare_ratios = [max(b[p] for p in bare_masters) / s[single_port] for s, _, _, _, b in rounds]
    single_cpu, single_rate, cluster_cpu, cluster_rate, _ = rounds[median_round(ratios)]
    one = single_cpu[single_port]
    busiest = max(cluster_cpu[p] for p in masters)
    every = sum(cluster_cpu[p] for p in masters)
    copies = sum(cluster_cpu[p] for p in replicas)
    print(f"busiest master / single per round: {'  '.join(f'{r:.3f}' for r in ratios)}; the median round:")
    print(f"single instance Redis CPU   {one:8.2f} s for {args.jobs:,} jobs ({per_job_us(one, args.jobs):.1f} µs/job)")
    print("cluster masters Redis CPU   " + "  ".join(f"{cluster_cpu[p]:.2f} s" for p in masters))
    print(f"  all masters together      {every:8.2f} s ({per_job_us(every, args.jobs):.1f} µs/job, "
          f"{every / one:.2f}x the single instance: replication feed and cluster bus)")
    print(f"  busiest master            {busiest:8.2f} s ({per_job_us(busiest, args.jobs):.1f} µs per job of the whole run)")
    print(f"  all replicas together     {copies:8.2f} s ({per_job_us(copies, args.jobs):.1f} µs/job)")
    if replicated_cpu:
        fed = replicated_cpu[single_port]
        print(f"single instance + a replica {fed:8.2f} s ({per_job_us(fed, args.jobs):.1f} µs/job; "
              f"all cluster masters are {every / fed:.2f}x this)")
    print(f"busiest master / single     {busiest / one:8.3f}     (median of {args.rounds} rounds; target <= 0.45)")
    if replicated_cpu:
        print(f"busiest master / single + a replica {busiest / replicated_cpu[single_port]:.2f} (the same replication on both sides)")
    bare_median = bare_ratios[median_round(bare_ratios)]
    print(f"3 masters without replicas: busiest / single {bare_median:.2f} (median; per round "
          f"{'  '.join(f'{r:.2f}' for r in bare_ratios)}; neither side feeds a replica)")
    print(f"one worker, single instance {single_rate:8,.0f} jobs/s")
    print(f"one worker, 3-master cluster {cluster_rate:7,.0f} jobs/s ({PARTITIONS} partitions)")
    print(f"  with STREAMCREW_REPLICA_ACKS=1 {acked_rate:5,.0f} jobs/s (ratio {acked_rate / cluster_rate:.2f} to no WAIT)")


if __name__ == "__main__":
    main()
