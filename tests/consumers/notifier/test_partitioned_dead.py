"""Webhook dead letters with ``STREAMCREW_PARTITIONS=4`` on one real Redis (contract §10): named ``<entry ID>:<p>``,
listed merged oldest first by the CLI and over HTTP, paged exactly, summed by stats, replayed into their own partition, purged."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import orjson
from redis.asyncio import Redis

from consumers.notifier.dead import count_webhook_dead
from consumers.processes import streamcrew_cmd
from streams.envelope import entry_order
from streams.keys import Keys, partition_keys
from streams.partition_stats import partitioned_queue_stats
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.notifier.conftest import NotifierFactory, add_result
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.consumers.notifier.test_partitions import PARTITIONED, PARTITIONS, webhook_ids
from tests.support import wait_until

# Two letters with one entry ID in partitions 1 and 2 (older than any the notifier writes): a bare ID is ambiguous.
TWIN = "1-0"


def cli(redis_url: str, prefix: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(streamcrew_cmd("webhooks", "dead", *args, "--redis-url", redis_url, "--prefix", prefix),
                          capture_output=True, text=True, timeout=30, env={**os.environ, **PARTITIONED, **(env or {})})


def partition(name: str) -> int:
    return int(name.rsplit(":", 1)[1])


async def test_webhook_dead_letters_across_partitions(
    redis: Redis, redis_url: str, prefix: str, keys: Keys, notifiers: NotifierFactory, receiver: Receiver, tmp_path: Path,
) -> None:
    parts = partition_keys(keys, PARTITIONS)
    for p in (1, 2):
        await redis.xadd(parts[p].webhooks_dead, {"id": f"twin-{p}", "url": receiver.url("/twin"), "attempts": "1", "last_status": "503",
                                                  "error": "503", "dead_at": "1", "event": orjson.dumps({"id": f"twin-{p}"}).decode()}, id=TWIN)
    # Given two results in each of 4 partitions to an endpoint that answers 410 Gone to the first 8 deliveries
    receiver.script("/gone", [Reply(410)] * 2 * PARTITIONS)
    for p, part in enumerate(parts):
        for n in range(2):
            await add_result(redis, part, f"p{p}-{n}", receiver.url("/gone"))
    notifier = notifiers.start("--backoff", "0.05", "--lease", "2", env=PARTITIONED)

    async def each_dead() -> bool:
        return [await redis.xlen(part.webhooks_dead) for part in parts] == [2, 3, 3, 2]

    await wait_until(each_dead, timeout=15, what="two webhook dead letters in each partition")
    notifier.stop()
    assert await count_webhook_dead(redis, keys, partitions=PARTITIONS) == 10
    assert (await partitioned_queue_stats(redis, keys, PARTITIONS, window=None))["webhooks"]["dead_letters"] == 10
    gateways = GatewayFactory(redis_url, prefix, tmp_path)
    try:
        gateway = await gateways.start(PARTITIONED)
        async with gateway.client() as client:
            # Then the CLI lists them oldest first across partitions, each named <entry ID>:<partition> of its own partition
            listed = cli(redis_url, prefix, "list", "--json")
            assert listed.returncode == 0, listed.stderr
            letters = [json.loads(line) for line in listed.stdout.splitlines()]
            names = [d["entry_id"] for d in letters]
            assert names == sorted(names, key=lambda n: (entry_order(n.rsplit(":", 1)[0]), partition(n)))
            assert names[:2] == [f"{TWIN}:1", f"{TWIN}:2"]
            assert all(d["id"] == f"twin-{partition(d['entry_id'])}" or d["id"].startswith(f"p{partition(d['entry_id'])}-") for d in letters)
            assert {d["id"] for d in letters if d["last_status"] == 410} == {f"p{p}-{n}" for p in range(PARTITIONS) for n in range(2)}
            # And as a table (80 columns, a pipe) every entry name stays whole, to be copied into `webhooks dead replay`
            table = cli(redis_url, prefix, "list", env={"COLUMNS": "80"}).stdout
            assert all(name in table for name in names), table
            # And HTTP pages of 3 cover the same list exactly once
            paged, after = [], None
            while True:
                page = (await client.get("/webhooks/dead", params={"count": 3, **({"after": after} if after else {})})).json()
                paged += [d["entry_id"] for d in page["dead_letters"]]
                if (after := page["next_after"]) is None:
                    break
            assert paged == names
            # When a bare entry ID two partitions have is replayed, it is refused naming both
            twin = await client.post(f"/webhooks/dead/{TWIN}/replay")
            assert twin.status_code == 409 and f"{TWIN}:1, {TWIN}:2" in twin.json()["error"]["message"], twin.text
            # And one is replayed by name over HTTP, one by its bare (unique) entry ID with the CLI
            gone = [n for n in names if not n.startswith(f"{TWIN}:")]
            one = await client.post(f"/webhooks/dead/{gone[0]}/replay")
            assert (one.status_code, one.json()) == (202, {"replayed": [gone[0]], "skipped": []})
            bare = next(n for n in gone[1:] if sum(m.rsplit(":", 1)[0] == n.rsplit(":", 1)[0] for m in names) == 1)
            by_cli = cli(redis_url, prefix, "replay", bare.rsplit(":", 1)[0])
            assert (by_cli.returncode, json.loads(by_cli.stdout)) == (0, {"replayed": [bare], "skipped": []}), by_cli.stderr
            assert (await client.post(f"/webhooks/dead/{gone[0]}/replay")).status_code == 404
            # And the rest all at once: the twins with the CLI, then everything left over HTTP
            twins = cli(redis_url, prefix, "replay", f"{TWIN}:1", f"{TWIN}:2")
            assert json.loads(twins.stdout) == {"replayed": [f"{TWIN}:1", f"{TWIN}:2"], "skipped": []}, twins.stderr
            rest = await client.post("/webhooks/dead/replay")
            assert rest.status_code == 202 and sorted(rest.json()["replayed"]) == sorted(set(gone) - {gone[0], bare})
        # Then each letter waits in its own partition's due stream, none is left dead
        assert await count_webhook_dead(redis, keys, partitions=PARTITIONS) == 0
        due = {p: {f["id"] for _, f in await redis.xrange(part.webhooks_due)} for p, part in enumerate(parts)}
        assert due == {p: {f"p{p}-0", f"p{p}-1"} | ({f"twin-{p}"} if p in (1, 2) else set()) for p in range(PARTITIONS)}
        # And a notifier delivers each once more, now that the receiver answers 200
        notifiers.start("--backoff", "0.05", "--lease", "2", env=PARTITIONED)

        async def delivered() -> bool:
            return receiver.count("/gone") == 16 and receiver.count("/twin") == 2

        await wait_until(delivered, timeout=15, what="every replayed letter delivered")
        assert webhook_ids(receiver, "/gone") == Counter({f"p{p}-{n}": 2 for p in range(PARTITIONS) for n in range(2)})
        assert webhook_ids(receiver, "/twin") == Counter({"twin-1": 1, "twin-2": 1})
        assert await count_webhook_dead(redis, keys, partitions=PARTITIONS) == 0
        # And purge empties every partition
        for p in (0, 3):
            await redis.xadd(parts[p].webhooks_dead, {"id": f"x{p}", "url": receiver.url("/x"), "event": "{}"})
        purged = cli(redis_url, prefix, "purge", "--yes")
        assert json.loads(purged.stdout) == {"purged": 2}, purged.stderr
        assert cli(redis_url, prefix, "list", "--json").stdout == ""
    finally:
        gateways.close()
