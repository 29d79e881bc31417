"""Soak: a mixed workload for minutes while workers, the notifier and the gateway (and, on a cluster, masters) are SIGKILLed.

    .venv/bin/python -m bench.soak [--seconds 600] [--cluster [--replica-acks]] [--stalls] [--restarts] [--drops] [--pauses]
        [--tenants] [--partitions N] [--seed 1] [--keep-logs]

Not a speed bench: it checks the invariants over a long, varied run, which the tests check in short ones.
Three workers (20 slots, 3 s lease), one notifier and one gateway run against a private Redis with 3
partitions (or a local 3-master + 3-replica cluster with 6, ``--cluster``; ``--partitions`` sets another number). Through the gateway, in
batches of 20 sent at once: echo jobs of up to 0.4 s, jobs that fail once or twice before completing,
jobs that exhaust their attempts, workflows of 2 - 5 steps (some chained), repeats of earlier ids, 30 %
with a webhook to a receiver that answers 503 to one request in ten. Meanwhile a random worker is
SIGKILLed and replaced every 2 - 5 s, the notifier every ~20 s, the gateway every ~30 s, and on a cluster
a master every ~40 s (revived as a replica). ``--stalls``: the private Redis is frozen (SIGSTOP) for 1 - 7 s
every 15 - 35 s, longer than the workers' leases, as a fork, a swapping host or a paused VM freezes it.
``--restarts``: it keeps an append-only file (fsync always) and is SIGKILLed every 30 - 60 s, started again
1 - 3 s later. ``--drops``: every client connection is closed (``CLIENT KILL TYPE normal``, on every master)
every 5 - 15 s, as a proxy, a load balancer or a network blip closes them, so calls in flight are sent again.
``--pauses``: a random worker is SIGSTOPped for 4 - 8 s every 10 - 20 s, past its lease (a GC pause, a frozen
container): others take its running jobs over and run them again, and it wakes up still running its copies.
``--tenants``: 60 % of the jobs and workflows name one of three tenants, and the workers cap them
(``STREAMCREW_TENANT_MAX_RUNNING``, TENANT_CAPS below), so jobs are parked and moved back all through the chaos;
twice a second the run checks that no partition holds more live slots of a tenant than its share, and at the end
that nothing is left parked or holding a slot.
Then it waits for the run to settle and checks: one result event per job and per workflow step, the
expected status of each (a job whose every attempt's worker was SIGKILLed is counted apart: crashes count as
attempts), dead letters exactly for the jobs that exhausted their attempts, every webhook delivered
(receivers see some twice: at least once), no webhook dead letters, and every group drained (pending and
lag 0). A process that exits on its own is started again, as a supervisor would, and counted as a problem: one
started while Redis is down waits for it. Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from aiohttp import web
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError

from bench.common import bench_redis, new_prefix, private_redis
from bench.soak_tenants import TENANT_CAPS, TENANT_SHARE, TENANTS, slots_held, tenant_problems
from consumers.processes import Child, streamcrew_cmd
from streams.connection import connect_detected
from streams.embedded import RedisServer, free_port
from streams.keys import Keys, partition_keys
from tests.cluster_support import LocalCluster, cluster_binaries

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BATCH = 20
CRASHES_COUNT = "(worker crashes and reclaims count)"  # what an attempt budget spent by crashes says
SETTLE_TIMEOUT_S = 300.0


@dataclass
class FlakyReceiver:
    """Webhook endpoint on loopback: answers 503 to one request in ten, else 200 after up to 50 ms; counts 200s per webhook-id."""

    rng: random.Random
    delivered: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests += 1
        if self.rng.random() < 0.1:
            return web.Response(status=503)
        await asyncio.sleep(self.rng.random() * 0.05)
        self.delivered[request.headers.get("webhook-id", "?")] += 1
        return web.Response(status=200)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return f"http://127.0.0.1:{self.port}/hook"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class Fleet:
    """The streamcrew processes of the run, each replaced by a fresh one when killed."""

    env: dict[str, str]
    logs: Path
    gateway_port: int
    workers: list[Child] = field(default_factory=list)
    notifier: Child | None = None
    gateway: Child | None = None
    started: Counter[str] = field(default_factory=Counter)
    paused: set[int] = field(default_factory=set)  # pids of workers SIGSTOPped now (--pauses): the kills spare them

    def _start(self, command: str, *args: str) -> Child:
        self.started[command] += 1
        return Child(streamcrew_cmd(command, *args), env=self.env, log_path=self.logs / f"{command}-{self.started[command]}.log")

    def worker(self) -> Child:
        return self._start("worker", "--concurrency", "20", "--lease", "3")

    def start(self) -> None:
        self.workers = [self.worker() for _ in range(3)]
        self.restart_notifier()
        self.restart_gateway()

    def restart_notifier(self) -> None:
        if self.notifier is not None:
            self.notifier.kill()
        self.notifier = self._start("notifier", "--allow-private", "--backoff", "0.2", "--max-attempts", "30")

    def restart_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.kill()
        self.gateway = self._start("gateway", "--host", "127.0.0.1", "--port", str(self.gateway_port))

    def replace_worker(self, index: int) -> None:
        self.workers[index].kill()
        self.workers[index] = self.worker()

    def revive_exited(self) -> Counter[str]:
        """Start again what exited on its own, as a supervisor would (compose's restart policy, Kubernetes); returns
        '<command> exit <code>' counts. A process exits 4 when Redis is down as it starts (one clear line, no retry)."""
        exited: Counter[str] = Counter()
        for index, worker in enumerate(self.workers):
            if not worker.alive():
                exited[f"worker exit {worker.process.returncode}"] += 1
                self.workers[index] = self.worker()
        if self.notifier is not None and not self.notifier.alive():
            exited[f"notifier exit {self.notifier.process.returncode}"] += 1
            self.restart_notifier()
        if self.gateway is not None and not self.gateway.alive():
            exited[f"gateway exit {self.gateway.process.returncode}"] += 1
            self.restart_gateway()
        return exited

    def stop(self) -> None:
        children = [*self.workers, self.notifier, self.gateway]
        for child in children:
            if child is not None:
                child.terminate()
        for child in children:
            if child is not None and child.wait(40) is None:
                child.kill()


@dataclass
class Workload:
    """What was submitted and what each job should end as."""

    rng: random.Random
    hook: str
    tenants: bool = False  # --tenants: name one of TENANTS on TENANT_SHARE of the jobs and workflows
    expected: dict[str, str] = field(default_factory=dict)  # job id -> terminal status
    webhooked: set[str] = field(default_factory=set)
    refused: Counter[str] = field(default_factory=Counter)  # gateway answers and transport errors that were retried
    jobs: list[str] = field(default_factory=list)  # ids of the jobs (not workflows) submitted, in order
    n: int = 0

    def _next(self, earlier: int) -> dict[str, object]:
        self.n += 1
        jid, kind = f"j{self.n}", self.rng.random()
        body: dict[str, object] = {"agent": "echo", "id": jid, "data": {"sleep_s": round(self.rng.random() * 0.4, 3)}}
        status = "completed"
        if kind < 0.15:
            body["data"] = {"fail_first": self.rng.randint(1, 2)}
            body["max_attempts"] = 5
        elif kind < 0.2:
            body["data"] = {"fail_first": 9}
            body["max_attempts"] = 2
            status = "failed"
        elif kind < 0.3:
            wid = f"w{self.n}"
            steps = [{"id": f"s{k}", "agent": "echo", "data": {"sleep_s": round(self.rng.random() * 0.3, 3)},
                      **({"after": [f"s{k - 1}"]} if k and self.rng.random() < 0.6 else {})} for k in range(self.rng.randint(2, 5))]
            body = {"agent": "workflow", "id": wid, "data": {"steps": steps}}
            self.expected.update({f"{wid}::{s['id']}": "completed" for s in steps})
            jid = wid
        elif kind < 0.4 and earlier:
            # a repeat of an id sent in an earlier batch (one of the same batch could arrive first): no second job
            return {"agent": "echo", "id": self.jobs[self.rng.randrange(earlier)], "data": {"repeat": True}}
        if body["agent"] == "echo":
            self.jobs.append(jid)
        if self.tenants and self.rng.random() < TENANT_SHARE:
            body["tenant"] = self.rng.choice(TENANTS)  # a workflow's steps carry its tenant
        if self.rng.random() < 0.3:
            body["webhook"] = self.hook
            self.webhooked.add(jid)
        self.expected[jid] = status
        return body

    def batch(self) -> list[dict[str, object]]:
        earlier = len(self.jobs)
        return [self._next(earlier) for _ in range(BATCH)]


async def post(client: httpx.AsyncClient, url: str, body: dict[str, object], refused: Counter[str]) -> None:
    """POST a job, again with the same id while the gateway is down or Redis fails over (both are safe to repeat)."""
    for _ in range(600):
        try:
            answer = await client.post(url, json=body, timeout=10)
            if answer.status_code in (200, 202):
                return
            refused[str(answer.status_code)] += 1
            if answer.status_code < 500:
                raise SystemExit(f"the gateway refused {body.get('id')}: {answer.status_code} {answer.text[:200]}")
        except httpx.HTTPError as exc:
            refused[type(exc).__name__] += 1
        await asyncio.sleep(0.1)
    raise SystemExit(f"could not submit {body.get('id')} in 600 tries")


async def submit(workload: Workload, gateway_url: str, until: float) -> None:
    async with httpx.AsyncClient() as client:
        while time.monotonic() < until:
            await asyncio.gather(*(post(client, f"{gateway_url}/jobs", body, workload.refused) for body in workload.batch()))


async def chaos(fleet: Fleet, cluster: LocalCluster | None, rng: random.Random, until: float) -> Counter[str]:
    kills: Counter[str] = Counter()
    now = time.monotonic()
    next_notifier, next_gateway, next_master = now + 20, now + 30, now + 25
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(2, 5))  # the chaos schedule itself, not a synchronisation
        awake = [i for i, w in enumerate(fleet.workers) if w.pid not in fleet.paused]
        fleet.replace_worker(rng.choice(awake or range(len(fleet.workers))))
        kills["worker"] += 1
        now = time.monotonic()
        if now > next_notifier:
            fleet.restart_notifier()
            kills["notifier"] += 1
            next_notifier = now + rng.uniform(15, 25)
        if now > next_gateway:
            fleet.restart_gateway()
            kills["gateway"] += 1
            next_gateway = now + rng.uniform(25, 35)
        if cluster is not None and now > next_master:
            victim = rng.choice(sorted(cluster.masters()))
            await asyncio.to_thread(cluster.kill, victim)
            await asyncio.sleep(8)
            await asyncio.to_thread(cluster.revive, victim)
            kills["master"] += 1
            next_master = time.monotonic() + rng.uniform(30, 45)
    return kills


async def supervise(fleet: Fleet, exited: Counter[str]) -> None:
    """Until cancelled: every second, start again the processes that exited on their own."""
    while True:
        await asyncio.sleep(1)  # a supervisor's poll, not a synchronisation
        exited.update(fleet.revive_exited())


async def no_chaos() -> Counter[str]:
    return Counter()


async def chaos_schedule(
    name: str, act: Callable[[float], Awaitable[bool]], every_s: tuple[float, float], for_s: tuple[float, float],
    one_at_a_time: asyncio.Lock, rng: random.Random, until: float,
) -> Counter[str]:
    """Every ``every_s`` seconds (a random pick in the range), ``act`` for ``for_s`` seconds, one act sharing the lock at
    a time; counts the acts done (an act answers False when it found nothing to act on)."""
    done: Counter[str] = Counter()
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(*every_s))  # the chaos schedule itself, not a synchronisation
        seconds = rng.uniform(*for_s)
        async with one_at_a_time:  # a stall never meets a restart
            if not await act(seconds):
                continue
        done[name] += 1
        done["seconds"] += round(seconds)
    return done


async def stopped(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT."""
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def freeze(server: RedisServer) -> Callable[[float], Awaitable[bool]]:
    """SIGSTOP: every client's calls hang, leases run out meanwhile."""
    async def act(seconds: float) -> bool:
        assert server.process is not None
        await stopped(server.process.pid, seconds)
        return True
    return act


def restart(server: RedisServer) -> Callable[[float], Awaitable[bool]]:
    """SIGKILL, then start again on the append-only file (fsync always: nothing acknowledged is lost)."""
    async def act(seconds: float) -> bool:
        await asyncio.to_thread(server.stop, kill=True)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(server.start)
        return True
    return act


def pause(fleet: Fleet, rng: random.Random) -> Callable[[float], Awaitable[bool]]:
    """SIGSTOP a ready worker past its lease (a GC pause, a frozen container): its running jobs are taken over and run
    again while it sleeps, and it wakes up beside the workers that took them. The kills spare it meanwhile."""
    async def act(seconds: float) -> bool:
        ready = [w for w in fleet.workers if " ready: " in w.log_text()]  # one still importing holds no job
        if not ready:
            return False
        worker = rng.choice(ready)
        fleet.paused.add(worker.pid)
        try:
            await stopped(worker.pid, seconds)
        finally:
            fleet.paused.discard(worker.pid)
        return True
    return act


async def drops(redis: Redis, rng: random.Random, until: float) -> Counter[str]:
    """Close every client connection now and then: calls in flight fail or are sent again on a new connection."""
    closed: Counter[str] = Counter()
    while time.monotonic() < until:
        await asyncio.sleep(rng.uniform(5, 15))  # the chaos schedule itself, not a synchronisation
        kill = ("CLIENT", "KILL", "TYPE", "normal")
        try:
            if isinstance(redis, RedisCluster):
                replies = await redis.execute_command(*kill, target_nodes=RedisCluster.PRIMARIES)
                closed["connections"] += sum(int(n) for n in replies.values())
            else:
                closed["connections"] += int(await redis.execute_command(*kill))
        except RedisError as exc:  # a master failing over: the next round closes them
            closed[type(exc).__name__] += 1
        closed["rounds"] += 1
    return closed


async def entries(redis: Redis, streams: list[str]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for stream in streams:
        out += [{str(k): str(v) for k, v in (fields or {}).items()} for _, fields in await redis.xrange(stream) or []]
    return out


async def undrained(redis: Redis, parts: Sequence[Keys]) -> dict[str, tuple[int, int | None]]:
    """Groups with entries pending or not yet delivered: (pending, lag)."""
    out: dict[str, tuple[int, int | None]] = {}
    for keys in parts:
        for stream in (*keys.work_streams, keys.results):
            if await redis.exists(stream):
                for group in await redis.xinfo_groups(stream):
                    if group["pending"] or group.get("lag"):
                        out[f"{stream}/{group['name']}"] = (int(group["pending"]), group.get("lag"))
    return out


def expectations(results: list[dict[str, str]], workload: Workload) -> tuple[set[str], dict[str, str]]:
    """The jobs that failed because every attempt's worker was killed, and the status each job and step should end in.

    Crashes count as attempts (contract §2): a job whose every attempt's worker was SIGKILLed ends failed, and
    so does its workflow, whose steps that could no longer run are skipped: no job, no result event (§9). Rare at
    this kill rate (one job in 125,000 in a run; a Redis restart, which leaves every running job to be taken
    over, makes it likelier); counted, not a problem.
    """
    killed = {r["id"] for r in results
              if r["status"] == "failed" and CRASHES_COUNT in r.get("error", "") and workload.expected.get(r["id"]) == "completed"}
    killed |= {job.split("::")[0] for job in killed if "::" in job}
    skipped = {f"{r['id']}::{step}" for r in results if r["id"] in killed and "::" not in r["id"]
               for step, outcome in json.loads(r.get("result") or "{}").get("steps", {}).items() if outcome.get("status") == "skipped"}
    return killed, {job: ("failed" if job in killed else want) for job, want in workload.expected.items() if job not in skipped}


async def check(redis: Redis, parts: Sequence[Keys], workload: Workload, receiver: FlakyReceiver, *, strict_caps: bool | None = None) -> bool:
    """The run's invariants; ``strict_caps`` (--tenants; None without) also checks the tenant caps (tenant_problems)."""
    results = await entries(redis, [p.results for p in parts])
    counts = Counter(r["id"] for r in results)
    status = {r["id"]: r["status"] for r in results}
    killed, expected = expectations(results, workload)
    dead = Counter(d["id"] for d in await entries(redis, [p.dead for p in parts]))
    exhausted = {job for job, s in expected.items() if s != "completed"}
    webhook_dead = sum([int(await redis.xlen(p.webhooks_dead)) for p in parts])
    problems = {
        "lost": sorted(set(expected) - set(counts)),
        "result events twice": sorted(job for job, n in counts.items() if n > 1),
        "results nobody asked for": sorted(set(counts) - set(expected)),
        "wrong status": sorted(f"{job}: {status[job]}, not {want}" for job, want in expected.items() if status.get(job, want) != want),
        "dead letters missing": sorted(exhausted - set(dead)),
        "dead letters not expected": sorted(set(dead) - exhausted),
        "dead letters twice": sorted(job for job, n in dead.items() if n > 1),
        "webhooks never delivered": sorted(job for job in workload.webhooked if not receiver.delivered[job]),
        # far above what the kill rate explains: attempts counted that no crash spent
        "exhausted by kills, over 1 in 1,000": sorted(killed) if len(killed) * 1000 > len(expected) else [],
        "groups not drained": [f"{name}: pending {p}, lag {lag}" for name, (p, lag) in (await undrained(redis, parts)).items()],
        **(await tenant_problems(redis, parts, results, strict_caps) if strict_caps is not None else {}),
    }
    twice = sum(1 for n in receiver.delivered.values() if n > 1)
    print(f"{len(expected):,} jobs and steps, {len(results):,} result events, {len(dead):,} dead letters, "
          f"{len(workload.webhooked):,} webhooks ({receiver.requests:,} requests, {twice} delivered twice: at least once), "
          f"{webhook_dead} webhook dead letters; {len(killed)} failed because every attempt's worker was killed {sorted(killed)[:10]}")
    for name, found in problems.items():
        print(f"  {name}: {len(found)} {found[:10] if found else ''}")
    return webhook_dead == 0 and not any(problems.values())


async def settled(redis: Redis, parts: Sequence[Keys], workload: Workload, receiver: FlakyReceiver) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        results = await entries(redis, [p.results for p in parts])
        if {r["id"] for r in results} >= set(expectations(results, workload)[1]) and all(receiver.delivered[j] for j in workload.webhooked) and not await undrained(redis, parts):
            return
        await asyncio.sleep(1)
    print(f"not settled after {SETTLE_TIMEOUT_S:.0f} s; checking what there is")


async def soak(
    url: str, partitions: int, cluster: LocalCluster | None, args: argparse.Namespace, logs: Path, *, server: RedisServer | None = None,
) -> bool:
    rng = random.Random(args.seed)
    receiver = FlakyReceiver(random.Random(args.seed + 1))
    hook = await receiver.start()
    prefix = new_prefix("soak")
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_PARTITIONS": str(partitions),
           "STREAMCREW_WEBHOOK_SECRET": SECRET, "STREAMCREW_METRICS_PORT": "0",
           "STREAMCREW_ALLOW_PRIVATE": "true",  # the receiver is on loopback: the gateway refuses such webhooks otherwise
           **({"STREAMCREW_REPLICA_ACKS": "1"} if args.replica_acks else {}),
           **({"STREAMCREW_TENANT_MAX_RUNNING": TENANT_CAPS} if args.tenants else {})}
    fleet = Fleet(env, logs, free_port())
    gateway_url = f"http://127.0.0.1:{fleet.gateway_port}"
    redis = await connect_detected(url)
    parts = partition_keys(Keys(prefix), partitions)
    workload = Workload(rng, hook, tenants=args.tenants)
    fleet.start()
    exited: Counter[str] = Counter()
    supervisor = asyncio.create_task(supervise(fleet, exited))
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{gateway_url}/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
        started = time.monotonic()
        until = started + args.seconds
        one_at_a_time = asyncio.Lock()
        frozen = (chaos_schedule("stalls", freeze(server), (15, 35), (1, 7), one_at_a_time, random.Random(args.seed + 2), until)
                  if server and args.stalls else no_chaos())
        closed = drops(redis, random.Random(args.seed + 3), until) if args.drops else no_chaos()
        restarted = (chaos_schedule("restarts", restart(server), (30, 60), (1, 3), one_at_a_time, random.Random(args.seed + 4), until)
                     if server and args.restarts else no_chaos())
        paused = (chaos_schedule("pauses", pause(fleet, random.Random(args.seed + 5)), (10, 20), (4, 8), asyncio.Lock(),
                                 random.Random(args.seed + 6), until) if args.pauses else no_chaos())
        sampled = slots_held(redis, parts, until) if args.tenants else no_chaos()
        kills, _, *more = await asyncio.gather(
            chaos(fleet, cluster, rng, until), submit(workload, gateway_url, until), frozen, closed, restarted, paused, sampled)
        others = "".join(f"{name} {dict(c)}; " for name, c in zip(
            ("Redis stalls", "connections closed", "Redis restarts", "worker pauses", "tenant slots sampled"), more) if c)
        over_share = sum(n for name, n in more[-1].items() if name.startswith("over the share"))
        print(f"{time.monotonic() - started:.0f} s of load: {len(workload.expected):,} jobs and steps; SIGKILLs {dict(kills)}; "
              f"{others}submissions retried after {dict(workload.refused)}")
        await settled(redis, parts, workload, receiver)
        ok = await check(redis, parts, workload, receiver, strict_caps=not (args.stalls or args.restarts) if args.tenants else None)
        if over_share:
            print(f"  tenant slots over a partition's share: {over_share} samples")
            ok = False
        print(f"  exited on their own and started again: {sum(exited.values())} {dict(exited) or ''} (a process started while "
              "Redis is down waits for it)")
        return ok and not exited
    finally:
        supervisor.cancel()
        fleet.stop()
        await receiver.stop()
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to submit and kill (default 600)")
    parser.add_argument("--cluster", action="store_true", help="a local 3-master + 3-replica cluster, 6 partitions, masters killed too")
    parser.add_argument("--replica-acks", action="store_true", help="STREAMCREW_REPLICA_ACKS=1 (with --cluster)")
    parser.add_argument("--stalls", action="store_true", help="freeze the private Redis (SIGSTOP) for 1 - 7 s every 15 - 35 s")
    parser.add_argument("--restarts", action="store_true",
                        help="SIGKILL the private Redis every 30 - 60 s and start it again on its append-only file")
    parser.add_argument("--drops", action="store_true", help="close every client connection every 5 - 15 s")
    parser.add_argument("--pauses", action="store_true", help="SIGSTOP a worker for 4 - 8 s (past its 3 s lease) every 10 - 20 s")
    parser.add_argument("--tenants", action="store_true",
                        help=f"jobs name one of {len(TENANTS)} tenants, capped by STREAMCREW_TENANT_MAX_RUNNING={TENANT_CAPS}")
    parser.add_argument("--partitions", type=int, default=None, help="STREAMCREW_PARTITIONS (default 3; 6 with --cluster)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--redis-url", default=None, help="a Redis to use instead of a private redis-server")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs after a run that held (kept anyway after one that did not)")
    args = parser.parse_args()
    if (args.stalls or args.restarts) and (args.cluster or args.redis_url):
        parser.error("--stalls and --restarts act on the private Redis: not with --cluster or --redis-url")
    logs = Path(tempfile.mkdtemp(prefix="streamcrew-soak-"))
    ok = False
    try:
        if args.cluster:
            binaries = cluster_binaries()
            if binaries is None:
                raise SystemExit("--cluster needs redis-server and redis-cli on PATH")
            cluster = LocalCluster(*binaries).start()
            try:
                partitions = args.partitions or 6
                cluster.place([str(p) for p in range(partitions)])
                ok = asyncio.run(soak(cluster.listed_url(), partitions, cluster, args, logs))  # every node: a restart finds one up
            finally:
                cluster.close()
        elif args.stalls or args.restarts:
            with private_redis(persist=args.restarts) as server:
                ok = asyncio.run(soak(server.url, args.partitions or 3, None, args, logs, server=server))
        else:
            with bench_redis(args.redis_url) as url:
                ok = asyncio.run(soak(url, args.partitions or 3, None, args, logs))
    finally:
        if ok and not args.keep_logs:
            shutil.rmtree(logs, ignore_errors=True)
    print(("OK" if ok else "PROBLEMS (see above)") + (f"; the processes' logs are in {logs}" if args.keep_logs or not ok else ""))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
