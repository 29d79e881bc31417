"""A Redis URL may list several cluster nodes (streams.seeds), or name them by one host name of several addresses
(streams.addresses): how it splits, how it is logged, and the clear refusals: a malformed list, a list pointing at a
single Redis (a name is no list: a single Redis behind it is used). No error quotes the URL (it may hold a password)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from consumers.processes import streamcrew_cmd
from streams.addresses import _distinct, _seeds, address_seeds, seed_nodes
from streams.connection import CLUSTER_SOCKET_TIMEOUT_S, NEXT_SEED_AFTER_S, cluster_enabled, connect
from streams.errors import ConfigError
from streams.seeds import first_and_others, seed_urls
from streams.urls import loggable_url
from tests.support import silent_ports, with_hosts

SECRET = "s3cret-pw"


def test_a_list_splits_into_one_url_per_node_with_the_same_credentials_path_and_query() -> None:
    url = f"redis://app:{SECRET}@Node-a:7000, node-b ,[::1]:7002/0?socket_timeout=3"
    assert seed_urls(url) == [f"redis://app:{SECRET}@Node-a:7000/0?socket_timeout=3", f"redis://app:{SECRET}@node-b/0?socket_timeout=3",
                              f"redis://app:{SECRET}@[::1]:7002/0?socket_timeout=3"]
    assert first_and_others(url) == (f"redis://app:{SECRET}@Node-a:7000/0?socket_timeout=3", [("node-b", 6379), ("::1", 7002)])
    assert loggable_url(url) == "redis://node-a:7000,node-b,[::1]:7002/0"
    # Another node's host is percent-decoded, as redis-py decodes the first's (an IPv6 zone)
    assert first_and_others("redis://h1:7000,[fe80::1%25lo]:7001/0")[1] == [("fe80::1%lo", 7001)]
    # One host stays exactly as given
    assert seed_urls(f"rediss://:{SECRET}@h:1/2") == [f"rediss://:{SECRET}@h:1/2"]


@pytest.mark.parametrize(("url", "says"), [
    (f"redis://u:{SECRET}@h1,,h2", "node 2 of the Redis URL's 3 names no host"),
    (f"redis://u:{SECRET}@h1:7000,h2:70000", "node 2 of the Redis URL's 2 has a port that is not a number"),
    (f"redis://u:{SECRET}@h1:7000,h2:0", "node 2 of the Redis URL's 2 has port 0; a node's port is 1 to 65535"),  # was 6379
    (f"unix://u:{SECRET}@a,b/tmp/redis.sock", "a unix:// Redis URL names one socket"),
    (f"redis://u:{SECRET}[pw]@h1:7000,h2:7000/0", "the Redis URL does not parse"),  # Python's IPv6 check quoted "pw"
    (f"redis://u:{SECRET}]pw@h1:7000/0", "the Redis URL does not parse"),
])
def test_a_malformed_list_is_refused_without_quoting_it(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        seed_urls(url)
    assert SECRET not in str(caught.value)
    # And every command refuses it as a setting, before touching Redis
    done = subprocess.run(streamcrew_cmd("stats", "--redis-url", url), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and says in done.stderr and SECRET not in done.stderr + done.stdout, done.stderr


async def test_a_list_naming_a_single_redis_is_refused(redis_url: str, refusing_port: int) -> None:
    # Given a single Redis listed after a node that is down
    host_port = redis_url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    listed = f"redis://127.0.0.1:{refusing_port},{host_port}/0"
    # Then the detection says what is wrong, and so does a command, with exit 2: waiting would not cure it
    with pytest.raises(ConfigError, match=f"lists 2 nodes, but redis://{host_port}/0 is not a Redis Cluster node"):
        await cluster_enabled(listed)
    with pytest.raises(ConfigError, match="only a Redis Cluster client"):
        connect(listed)
    done = subprocess.run(streamcrew_cmd("stats", "--redis-url", listed), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "STREAMCREW_REDIS_URL": ""})
    assert done.returncode == 2 and "is not a Redis Cluster node" in done.stderr, (done.returncode, done.stderr[-2000:])


def test_a_list_of_nodes_that_are_all_down_is_an_outage(refusing_port: int) -> None:
    # Given a URL listing only nodes that refuse connections, when a one-shot command runs, then Redis cannot be reached (exit 4)
    done = subprocess.run(streamcrew_cmd("stats", "--redis-url", f"redis://127.0.0.1:{refusing_port},localhost:{refusing_port}/0"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 4 and "cannot reach Redis" in done.stderr, (done.returncode, done.stderr[-2000:])


async def test_listed_nodes_that_hang_cost_a_start_about_a_second_each_not_their_socket_timeout(redis_url: str) -> None:
    host_port = redis_url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
    # Given a Redis listed after two nodes that take connections and never answer (paused VMs, hosts gone silent)
    with silent_ports(2) as silent:
        listed = "redis://" + ",".join([*(f"127.0.0.1:{port}" for port in silent), host_port]) + "/0"
        started = time.monotonic()
        # Then the node that answers is heard once each silent one kept quiet for a second, in the order listed:
        # before, each silent node was waited out for its 5 s socket timeout in turn (10 s here)
        with pytest.raises(ConfigError, match=f"lists 3 nodes, but redis://{host_port}/0 is not a Redis Cluster node"):
            await asyncio.wait_for(cluster_enabled(listed), timeout=CLUSTER_SOCKET_TIMEOUT_S)
        waited = time.monotonic() - started
        assert waited >= 2 * NEXT_SEED_AFTER_S * 0.9, f"the answering node was asked {waited:.1f} s in, before the silent ones had their second"


async def test_a_list_whose_nodes_all_fail_is_an_outage_and_leaves_no_probe_behind(refusing_port: int) -> None:
    # Given a URL listing a node that refuses and one that never answers
    with silent_ports(1) as (silent,):
        listed = f"redis://127.0.0.1:{silent},127.0.0.1:{refusing_port}/0"
        # Then the detection fails as an outage (a connection error), and leaves no probe behind
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(cluster_enabled(listed), timeout=3 * CLUSTER_SOCKET_TIMEOUT_S)
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()], asyncio.all_tasks()


def test_a_name_of_several_addresses_splits_into_one_url_per_address_with_the_same_credentials_path_and_query() -> None:
    # Given what a resolver answered for a name: two IPv4 addresses (one twice: TCP over two families' entries) and a
    # link-local IPv6 one with its zone
    infos = [(2, 1, 6, "", ("10.0.0.1", 7000)), (2, 1, 6, "", ("10.0.0.2", 7000)), (2, 1, 6, "", ("10.0.0.1", 7000)),
             (10, 1, 6, "", ("fe80::1%eth0", 7000, 0, 2))]
    url = "redis://user:p%40ss@nodes.example:7000/0?socket_timeout=3"
    # Then each address is a seed of its own, in the resolver's order, each with the URL's every other part
    assert _seeds(url, 7000, _distinct(infos)) == [
        "redis://user:p%40ss@10.0.0.1:7000/0?socket_timeout=3",
        "redis://user:p%40ss@10.0.0.2:7000/0?socket_timeout=3",
        "redis://user:p%40ss@[fe80::1%25eth0]:7000/0?socket_timeout=3",
    ]
    # And one address is nothing to split
    assert _seeds(url, 7000, _distinct(infos[:1])) == []


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:7000/0", "redis://[::1]:7000/0", "rediss://nodes.example:7000/0", "unix:///tmp/redis.sock",
])
async def test_an_address_tls_or_a_socket_is_not_split(url: str) -> None:
    # An address is one node; under TLS the certificate names the host, which an address in its place would fail
    assert await address_seeds(url) == []


async def test_the_nodes_a_url_names_are_looked_up_again_by_address_but_under_tls_by_name() -> None:
    # (What a cluster client asks once no node it knew answers: the cluster restarted on new addresses.)
    # A name by each address it has now, a listed address as given, each with its own port
    nodes = await seed_nodes(f"redis://app:{SECRET}@localhost:7000,10.0.0.9:7001/0")
    assert ("127.0.0.1", 7000) in nodes and ("10.0.0.9", 7001) in nodes
    assert all(host != "localhost" for host, _ in nodes), nodes
    # Under TLS the certificate names the host: the name itself, for the connect to resolve
    assert await seed_nodes("rediss://nodes.example:7000/0") == [("nodes.example", 7000)]


def test_a_single_redis_named_by_a_name_of_several_addresses_is_used_by_its_name(redis_url: str, prefix: str, tmp_path: Path) -> None:
    # Given a single Redis (not a cluster) on 127.0.0.1, named by a name that resolves to ::1 first (nothing there: it
    # refuses), then to 127.0.0.1, as localhost does on many hosts
    port = urlsplit(redis_url).port
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 two.test\n127.0.0.1 two.test\n")
    if (wrapper := with_hosts(hosts)) is None:
        pytest.skip("needs root and unshare(1) for an /etc/hosts of the test's own")
    # When a command is given the name
    done = subprocess.run([*wrapper, *streamcrew_cmd("stats", "--json", "--redis-url", f"redis://two.test:{port}/0", "--prefix", prefix)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "STREAMCREW_REDIS_URL": ""})
    # Then it runs against that Redis: a name is not a list, and a single Redis behind it is no error
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert json.loads(done.stdout)["results"]["length"] == 0
