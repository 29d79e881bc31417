"""A fleet-wide cap on how many jobs of one tenant run at once (``STREAMCREW_TENANT_MAX_RUNNING``).

A tenant that floods its lanes with slow jobs would otherwise fill every worker slot of the fleet, and every other
tenant's jobs would wait behind it. With a cap, a worker that claims a job whose tenant already has its share
running parks it (``tenant_cap.lua``: acked off its lane, kept in the tenant's list, no attempt counted); each
ending of one of that tenant's runs lets the oldest parked job go, to its lane's resumed stream, which workers read
just before the lane (it waited its turn in the lane once; a second wait behind the lane's backlog would hold the
tenant's slot idle for as long). Slots are members of a sorted set
whose score is a deadline, renewed with the leases, so a worker that dies holds none for ever; the upkeep frees
what such a death leaves parked. Unset, nothing here runs: no extra Redis call per job.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streams.envelope import JobRequest
from streams.keys import Keys
from streams.scripts import Scripts
from streams.slow_slots import SlowRounds, SlowSlots, slot_of
from streams.workflow import WORKFLOW_AGENT

# A run holds its slot this many leases unrenewed (renewed every quarter lease); past that, the slot is looked at before
# it counts and kept while its job's entry waits or is pending in its lane (tenant_cap.lua: tc_count), so a Redis stall
# does not free it under a live run, and a dead worker's slots are free once its jobs' entries are gone.
RUN_HOLD_LEASES = 2
# A job let go from the parked list, or handed back, holds a slot this many leases before the slot is first looked at
# again (kept while the job still waits to be read, however long the backlog ahead of it).
RESERVE_LEASES = 5
UNPARK_EVERY_S = 1.0
UNCAPPED_UNPARK_EVERY_S = 10.0  # with no cap set, the upkeep only lets go what a cap set before left parked
UNPARK_LIMIT = 500  # jobs one upkeep call moves for a tenant whose cap was removed
UNPARK_CALLS = 20  # calls one upkeep round makes for a partition while they move full batches (10,000 jobs a tenant)
DEFAULT_TENANT = "*"
# Workers compare their caps this often (cap_agree.lua); one not heard from for AGREE_LIVE_S is not compared, and
# is forgotten after AGREE_FORGET_S.
AGREE_EVERY_S = 30.0
AGREE_LIVE_S = 90.0
AGREE_FORGET_S = 600.0
AGREE_ROUND = -1  # the comparison's round among the partitions' renewal rounds (streams.slow_slots.SlowRounds)

log = logging.getLogger("streamcrew.jobs")


@dataclass(frozen=True, slots=True)
class TenantCaps:
    """Caps per tenant (0 = none); ``default`` is for tenants not named (``*``)."""

    default: int = 0
    tenants: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """The caps as ``STREAMCREW_TENANT_MAX_RUNNING`` would say them, in one canonical form (what workers compare)."""
        return json.dumps({DEFAULT_TENANT: self.default, **self.tenants}, sort_keys=True, separators=(",", ":"))

    def of(self, tenant: str | None) -> int:
        """The fleet-wide cap of ``tenant``; 0 = none (a job without a tenant is never capped)."""
        if not tenant:
            return 0
        return self.tenants.get(tenant, self.default)

    def share(self, tenant: str | None, partitions: int) -> int:
        """What one partition allows: ceil(cap / partitions), each partition counting on its own (one hash slot)."""
        cap = self.of(tenant)
        return math.ceil(cap / partitions) if cap else 0


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0 (0 = no cap), got {str(value)[:40]!r}")
    return value


def parse_tenant_caps(value: str | int | None) -> TenantCaps | None:
    """``N`` (every tenant) or JSON ``{"*": N, "acme": M}``; None when no tenant is capped (unset, empty, 0)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, int):
        caps = TenantCaps(default=_count(value, "STREAMCREW_TENANT_MAX_RUNNING"))
    else:
        try:
            spec = json.loads(value)
        except ValueError:
            raise ValueError('STREAMCREW_TENANT_MAX_RUNNING must be an integer or a JSON object such as {"*": 20, "acme": 100}') from None
        if not isinstance(spec, dict):
            if isinstance(spec, int | float):
                return parse_tenant_caps(_count(spec, "STREAMCREW_TENANT_MAX_RUNNING"))
            raise ValueError('STREAMCREW_TENANT_MAX_RUNNING as JSON must be an object of tenant -> cap, such as {"*": 20, "acme": 100}')
        tenants = {}
        for name, cap in spec.items():
            if not name:
                raise ValueError("STREAMCREW_TENANT_MAX_RUNNING: an empty tenant name (jobs without a tenant are never capped)")
            tenants[name] = _count(cap, f"STREAMCREW_TENANT_MAX_RUNNING[{name[:40]!r}]")
        caps = TenantCaps(default=tenants.pop(DEFAULT_TENANT, 0), tenants=tenants)
    return caps if caps.default or any(caps.tenants.values()) else None


class TenantCapper:
    """The worker's side of the caps: what ``start.lua`` and ``settle.lua`` are told per job, the renewal of this
    worker's slots, and the partitions' un-park upkeep."""

    def __init__(self, scripts: Scripts, caps: TenantCaps | None, *, partitions: int, lease_s: float,
                 worker: str = "", home: Keys | None = None, slow: SlowSlots | None = None) -> None:
        """``worker``, ``home``: this worker's name and the partition (0) where workers compare their caps (:meth:`agree`).
        ``slow`` (a cluster client's, streams.slow_slots): a partition whose master hangs is skipped, its call left to
        end in the background, so the worker's upkeep (which runs after these) is not held up by it."""
        self._scripts = scripts
        self._rounds = SlowRounds(slow, "tenant caps")
        self.caps = caps
        self._worker = worker
        self._home = home
        self._agreed_at = -AGREE_EVERY_S
        self._disagreeing: dict[str, str] = {}
        self._partitions = partitions
        self.hold_ms = int(lease_s * 1000 * RUN_HOLD_LEASES)
        self.reserve_ms = int(lease_s * 1000 * RESERVE_LEASES)
        self._renew_every_s = lease_s / 4
        self._renewed_at = 0.0
        self._unparked_at = 0.0
        self._moving = False  # the last round let parked jobs go: with no cap set, look again in a second, not ten

    def cap(self, request: JobRequest) -> int:
        """This partition's share of the request's tenant's cap; 0 = not capped (a workflow's own job holds no slot:
        it starts its steps and lets go; its steps carry its tenant and are capped)."""
        if self.caps is None or request.agent == WORKFLOW_AGENT:
            return 0
        return self.caps.share(request.tenant, self._partitions)

    def op_info(self, request: JobRequest) -> list[str] | None:
        """What a settle op of the request's job carries so that its ending frees the slot (None: not capped)."""
        cap = self.cap(request)
        return [request.tenant or "", str(cap), str(self.reserve_ms)] if cap else None

    async def renew(self, runs: Iterable[tuple[Keys, str, str]]) -> None:
        """Every quarter lease: push back the deadline of this worker's running capped jobs ``(keys, tenant, job id)``."""
        if self.caps is None or time.monotonic() - self._renewed_at < self._renew_every_s:
            return
        self._renewed_at = time.monotonic()
        by_partition: dict[Keys, list[str]] = {}
        for keys, tenant, job_id in runs:
            by_partition.setdefault(keys, []).extend((tenant, job_id))
        failed: Exception | None = None
        for keys, pairs in by_partition.items():  # a renewal skipped goes with the next: the hold is several leases
            try:
                await self._rounds.run(keys.partition or 0, slot_of(keys.slot_guard), functools.partial(self._renew, keys, pairs))
            except Exception as exc:  # one partition's failure renews the others all the same; raised for the backoff
                failed = failed or exc
        if failed is not None:
            raise failed

    async def _renew(self, keys: Keys, pairs: list[str]) -> None:
        await self._scripts.cap_renew(keys=[keys.slot_guard], args=[keys.job_prefix, self.hold_ms, *pairs])

    async def agree(self) -> None:
        """Every AGREE_EVERY_S: tell the other workers this one's caps, and warn while a live one was given others.
        Each worker applies its own value to the jobs it claims, so workers that differ (a rolling change, a
        Deployment without the setting) let a tenant run past the cap that was meant."""
        if self._home is None or time.monotonic() - self._agreed_at < AGREE_EVERY_S:
            return
        self._agreed_at = time.monotonic()
        key = caps_key(self._home)
        await self._rounds.run(AGREE_ROUND, slot_of(key), lambda: self._agree(key))

    async def _agree(self, key: str) -> None:
        mine = self.caps.describe() if self.caps else "none"
        pairs = await self._scripts.cap_agree(keys=[key], args=[self._worker, mine, int(AGREE_LIVE_S * 1000), int(AGREE_FORGET_S * 1000)])
        others = {str(pairs[i]): str(pairs[i + 1]) for i in range(0, len(pairs), 2)}
        if others == self._disagreeing:
            return
        if others:
            said = "; ".join(f"{name}: {value}" for name, value in sorted(others.items())[:10])
            log.warning("workers disagree on STREAMCREW_TENANT_MAX_RUNNING: this worker has %s, %d other live worker(s) "
                        "another value (%s); each applies its own to the jobs it claims: give every worker the same", mine, len(others), said)
        else:
            log.info("workers agree again on STREAMCREW_TENANT_MAX_RUNNING: %s", mine)
        self._disagreeing = others

    def unpark_due(self) -> bool:
        if time.monotonic() - self._unparked_at < (UNPARK_EVERY_S if self.caps or self._moving else UNCAPPED_UNPARK_EVERY_S):
            return False
        self._unparked_at = time.monotonic()
        self._moving = False
        return True

    async def unpark(self, keys: Keys) -> int:
        """Let go the partition's parked jobs that now fit, to their lanes' resumed streams (also with no cap set: a cap
        removed leaves none stranded); returns how many moved."""
        caps = self.caps or TenantCaps()
        shares = {name: self.caps.share(name, self._partitions) for name in caps.tenants} if self.caps else {}
        default = math.ceil(caps.default / self._partitions) if caps.default else 0
        total = 0
        for _ in range(UNPARK_CALLS):  # a cap removed lets go up to UNPARK_LIMIT a call: 100,000 parked took 33 minutes
            moved = int(await self._scripts.unpark(keys=[keys.slot_guard], args=[keys.job_prefix, keys.lane_prefix, self.reserve_ms,
                                                                                 UNPARK_LIMIT, default, json.dumps(shares)]))
            total += moved
            if moved < UNPARK_LIMIT:
                break
        self._moving = self._moving or total > 0
        return total


def parked_key(keys: Keys, tenant: str) -> str:
    """The list of ``tenant``'s parked jobs in ``keys``' partition (``LLEN`` tells how many)."""
    return f"{keys.prefix}:tenant:parked:{tenant}"


def running_key(keys: Keys, tenant: str) -> str:
    """The sorted set of ``tenant``'s running jobs in ``keys``' partition (job id -> deadline, epoch ms)."""
    return f"{keys.prefix}:tenant:running:{tenant}"


def parked_tenants_key(keys: Keys) -> str:
    """The hash of tenants with parked jobs in ``keys``' partition -> how many."""
    return f"{keys.prefix}:tenants-parked"


def caps_key(keys: Keys) -> str:
    """The hash where workers compare their caps (in partition 0's slot): worker -> ``<Redis ms>|<value>``."""
    return f"{keys.prefix}:tenant-caps"
