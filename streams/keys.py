"""Every Redis key streamcrew owns, built from one prefix.

All keys start with ``<prefix>:`` so ``SCAN MATCH <prefix>:*`` finds every key
the system owns and nothing else. With ``STREAMCREW_PARTITIONS=N`` > 1 (contract
§10) partition ``p`` owns the keys ``<prefix>:{<p>}:...``: one hash slot per
partition, so on Redis Cluster each Lua script touches one slot.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streams.config import StreamSettings

LANES: tuple[str, ...] = ("high", "normal", "low")
# A lane's resumed stream, ``<prefix>:requests:resumed-<lane>``: jobs that waited their turn in the lane once (let go from
# their tenant's parked list: streams.tenant_cap; handed back by a draining worker) wait there, read just before their
# lane, rather than behind the lane's whole backlog a second time.
RESUMED = "resumed-"
WORKERS_GROUP = "workers"
NOTIFIER_GROUP = "notifier"


# An id-less job's id in a partitioned prefix: its entry ID, then ``:`` and the partition.
GENERATED_ID = re.compile(r"^(?:(?:high|normal|low):)?\d+-\d+:(\d+)$")
# A workflow step's job id is ``<workflow id>::<step id>`` (step ids have no ':'): it lives with its workflow.
STEP_SEPARATOR = "::"
# One item of a ``--partitions`` list: ``3`` or ``0-5``.
RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def partition_of(job_id: str, partitions: int) -> int:
    """The partition of ``job_id``: that of the part before its last ``::``, else the one a generated id names,
    else crc32(id) mod N.

    A workflow's steps (``<workflow id>::<step id>``) so land in their workflow's partition, whatever its id.
    An explicit id of the generated shape lands where that shape points, so it meets a
    generated id it equals (and the publish script's idempotency holds) rather than colliding elsewhere.
    """
    if partitions <= 1:
        return 0
    while STEP_SEPARATOR in job_id:
        job_id = job_id.rsplit(STEP_SEPARATOR, 1)[0]
    if (named := GENERATED_ID.fullmatch(job_id)) and int(named.group(1)) < partitions:
        return int(named.group(1))
    return zlib.crc32(job_id.encode()) % partitions


def parse_partitions(spec: str, partitions: int) -> tuple[int, ...]:
    """``"0-3,5"`` -> (0, 1, 2, 3, 5); an empty spec means all ``partitions``; out of range is an error."""
    if not spec.strip():
        return tuple(range(partitions))
    chosen: set[int] = set()
    for part in spec.split(","):
        # Strictly ASCII digits: int() alone took "5-" for 5 (leaving 6.. unserved unsaid), "1_0" for 10, "+1", "١".
        if (bounds := RANGE.fullmatch(part.strip())) is None:
            raise ValueError(f"bad partition range {part!r}; use e.g. 0-3,5")
        first, last = int(bounds.group(1)), int(bounds.group(2) or bounds.group(1))
        if first > last:
            raise ValueError(f"partition range {part!r} runs backwards; write {last}-{first}")
        if last >= partitions:
            raise ValueError(f"partition range {part!r} is outside 0-{partitions - 1}")
        chosen.update(range(first, last + 1))
    return tuple(sorted(chosen))


@dataclass(frozen=True, slots=True)
class Keys:
    """The keys of one prefix, or of one partition of it (``partition`` set by :meth:`in_partition`)."""

    prefix: str = "streamcrew"
    partition: int | None = None

    def in_partition(self, p: int) -> Keys:
        """The keys of partition ``p``: ``<prefix>:{<p>}:...``, one hash slot."""
        if self.partition is not None:
            raise ValueError("these keys are already one partition's")
        if "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"prefix {self.prefix!r} has a hash tag; partitions bring their own, so drop the braces")
        return replace(self, prefix=f"{self.prefix}:{{{p}}}", partition=p)

    def generated_id(self, entry_id: str) -> str:
        """The job id of an id-less request with this entry ID: the entry ID, naming the partition when there is one."""
        return entry_id if self.partition is None else f"{entry_id}:{self.partition}"

    def lane(self, name: str) -> str:
        return f"{self.lane_prefix}{_known_lane(name)}"

    @property
    def lane_prefix(self) -> str:
        """``<prefix>:requests:``: a lane's key, or its resumed stream's, less its name (what the scripts are given)."""
        return f"{self.prefix}:requests:"

    @property
    def lanes(self) -> tuple[str, ...]:
        """Lane stream keys in strict priority order, high first."""
        return tuple(self.lane(n) for n in LANES)

    def resumed(self, name: str) -> str:
        """The stream where ``name``'s jobs let go from a parked list or handed back wait; read before the lane (see RESUMED)."""
        return f"{self.lane_prefix}{RESUMED}{_known_lane(name)}"

    @property
    def work_streams(self) -> tuple[str, ...]:
        """Every stream the ``workers`` group claims from: the three lanes and their resumed streams."""
        return self.lanes + tuple(self.resumed(n) for n in LANES)

    def lane_name(self, key: str) -> str:
        """What names the stream in a record's ``source`` (``<name>/<entry ID>``): ``normal``, or ``resumed-normal``."""
        return key.rsplit(":", 1)[-1]

    @property
    def results(self) -> str:
        return f"{self.prefix}:results"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def webhooks_dead(self) -> str:
        return f"{self.prefix}:webhooks:dead"

    @property
    def delayed(self) -> str:
        """Sorted set of requests waiting for their retry time (score: due epoch ms)."""
        return f"{self.prefix}:delayed"

    @property
    def webhooks_delayed(self) -> str:
        return f"{self.prefix}:webhooks:delayed"

    @property
    def webhooks_due(self) -> str:
        """Webhook retries whose time has come, read by the ``notifier`` group beside the results."""
        return f"{self.prefix}:webhooks:due"

    @property
    def webhooks_upkeep(self) -> str:
        """The lease on this partition's webhook promotion: the notifier it names does it (streams.upkeep)."""
        return f"{self.prefix}:webhooks:upkeep"

    @property
    def clock(self) -> str:
        """Last entry ID the producers issued: one clock for the three lanes keeps id-less job ids unique."""
        return f"{self.prefix}:clock"

    def receipt(self, token: str) -> str:
        """One script call's reply, kept briefly so a copy of the call (redis-py sends one after a lost reply) answers
        it instead of acting twice (publish.lua, replay.lua, the notifier's commit); ``token`` is drawn per call."""
        return f"{self.prefix}:receipt:{token}"

    def once(self, token: str) -> str:
        """Marks a write made once per ``token`` (a Kafka record's dead letter, named by where the record sits), kept
        as long as the write may be repeated (Kafka redelivers what was not committed): the repeat writes nothing."""
        return f"{self.prefix}:once:{token}"

    @property
    def slot_guard(self) -> str:
        """A key never written, declared (last) by every script that reaches keys it does not declare.

        Job records, workflow state and lanes named inside the scripts share the partition's hash slot but
        are not in KEYS, so Redis cannot check them while that slot moves to another master (a reshard):
        a script would see a record already moved as absent. This missing declared key makes Redis answer
        TRYAGAIN instead, for as long as the slot is migrating, and the caller's backoff tries again.
        """
        return f"{self.prefix}:slot-guard"

    @property
    def upkeep(self) -> str:
        """The lease on this partition's upkeep: the worker it names does it (streams.upkeep); it lapses unrenewed."""
        return f"{self.prefix}:upkeep"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    @property
    def job_prefix(self) -> str:
        return f"{self.prefix}:job:"

    def workflow(self, workflow_id: str) -> str:
        """A workflow's fan-in state (its steps, their results, the outstanding count); the Lua derives it from
        ``job_prefix``: ``<prefix>:job:`` -> ``<prefix>:wf:``."""
        return f"{self.prefix}:wf:{workflow_id}"

    @property
    def workflow_timeouts(self) -> str:
        """Sorted set of running workflows with a ``timeout_s`` (score: epoch ms when they expire)."""
        return f"{self.prefix}:workflows:timeouts"

    def ratelimit(self, name: str) -> str:
        return f"{self.prefix}:ratelimit:{name}"

    @property
    def pattern(self) -> str:
        return f"{self.prefix}:*"


def _known_lane(name: str) -> str:
    if name not in LANES:
        raise ValueError(f"unknown lane {name!r}; lanes are {', '.join(LANES)}")
    return name


def lane_of(name: str) -> str:
    """The lane (priority) of a stream named by :meth:`Keys.lane_name`: ``resumed-normal`` is ``normal``'s."""
    return name.removeprefix(RESUMED)


def partition_keys(keys: Keys, partitions: int) -> tuple[Keys, ...]:
    """Every partition's keys; N = 1 keeps the unpartitioned keys of contract §1."""
    if partitions <= 1:
        return (keys,)
    return tuple(keys.in_partition(p) for p in range(partitions))


def keys_for_job(keys: Keys, partitions: int, job_id: str) -> Keys:
    """The keys of the partition ``job_id`` lives in."""
    return keys if partitions <= 1 else keys.in_partition(partition_of(job_id, partitions))


def lanes_in_priority(partitions: tuple[Keys, ...]) -> list[str]:
    """Every partition's lanes, strict priority across partitions: all ``high`` lanes, then ``normal``, then ``low``,
    each lane's resumed streams just before it (levels of ``len(partitions)`` streams, which a worker's reads take in
    turn: see ``GroupRuntime``)."""
    return [stream for lane in LANES for stream in ([k.resumed(lane) for k in partitions] + [k.lane(lane) for k in partitions])]


def serving_partitions(keys: Keys, settings: StreamSettings, chosen: tuple[int, ...] | None = None) -> tuple[Keys, ...]:
    """The partitions a process serves: ``chosen`` (``--partitions``) or all ``settings.partitions``."""
    every = partition_keys(keys, settings.partitions)
    return every if chosen is None else tuple(every[p] for p in chosen)
