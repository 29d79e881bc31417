"""The upkeep of a prefix's partitions that any worker may do, each step one atomic script.

One worker at a time does a partition's upkeep: the holder of its lease (``Keys.upkeep``), renewed every second and
lapsing LEASE_S after the last renewal (a crash; a stopped worker lets it go). The others ask for it once a second,
so each idle worker adds one call a second to a partition's master, not ten. Every step is atomic and idempotent:
two workers doing one partition's upkeep at once (a holder slower than its lease) do no harm.

Per partition: end workflows whose timeout passed, move due retries back to their lanes, let go parked jobs that now
fit under their tenant's cap (to their lanes' resumed streams: streams.tenant_cap; every second), trim acknowledged entries. And
every 30 s the workers compare their tenant caps (TenantCapper.agree). Each partition is kept on its own: one that fails (its master away, a key of the wrong type) holds up
no other partition's retries, nor does one whose master hangs (streams.slow_slots); the first failure is raised once
the others are done, for the caller's backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from streams.config import StreamSettings
from streams.keys import Keys
from streams.outage import REDIS_FAILED
from streams.retention import trim_lanes, trim_results
from streams.scripts import Scripts
from streams.slow_slots import SlowRounds, SlowSlots, slot_of
from streams.tenant_cap import TenantCapper
from streams.workflows import WorkflowStarter

log = logging.getLogger(__name__)

PROMOTE_BATCH = 500
TRIM_EVERY_S = 1.0
LEASE_S = 3.0  # a partition's upkeep waits at most this (and ASK_EVERY_S) after its holder dies
ASK_EVERY_S = 1.0  # how often a worker renews its lease, or asks for one another holds
LET_GO_S = 5.0  # a stopping process's wait to give its leases up
LET_GO_FAILED: tuple[type[BaseException], ...] = (*REDIS_FAILED, TimeoutError)


class UpkeepLease:
    """Which partitions' upkeep this process holds (a lease key each: ``Keys.upkeep``, the notifier's
    ``Keys.webhooks_upkeep``): asked of Redis at most every ASK_EVERY_S per lease."""

    def __init__(self, scripts: Scripts, worker: str, *, lease_s: float = LEASE_S, ask_every_s: float = ASK_EVERY_S) -> None:
        self._scripts = scripts
        self._worker = worker
        self._lease_ms = int(lease_s * 1000)
        self._ask_every_s = ask_every_s
        self._answers: dict[str, tuple[float, bool]] = {}  # lease key -> (when to ask again, held)
        self._asked: set[str] = set()  # every lease asked for: an ask cut short (a cancel) may still have taken it
        self._let_go = False

    async def held(self, lease: str) -> bool:
        if self._let_go:
            return False
        now = time.monotonic()
        answer = self._answers.get(lease)
        if answer is not None and now < answer[0]:
            return answer[1]
        self._asked.add(lease)
        held = bool(await self._scripts.upkeep_lease(keys=[lease], args=[self._worker, self._lease_ms]))
        if self._let_go:  # let go of while this ask was under way: what it took goes too
            await self._scripts.upkeep_lease(keys=[lease], args=[self._worker, 0])
            return False
        self._answers[lease] = (now + self._ask_every_s, held)
        return held

    async def let_go(self) -> None:
        """Give up the leases held (a stopping process), so another takes them up within a second, not LEASE_S; a
        lease whose master does not answer within LET_GO_S lapses instead. Every lease ever asked for is let go
        (the script ends only the caller's own), and none is asked for after."""
        self._let_go = True
        self._answers.clear()
        leases = sorted(self._asked)
        try:
            async with asyncio.timeout(LET_GO_S):
                for lease in leases:
                    await self._scripts.upkeep_lease(keys=[lease], args=[self._worker, 0])
        except LET_GO_FAILED as exc:
            log.info("upkeep leases of %d partitions left to lapse (in %.0fs): %s", len(leases), LEASE_S, exc)


class Upkeep:
    def __init__(self, scripts: Scripts, workflows: WorkflowStarter, settings: StreamSettings, partitions: Sequence[Keys],
                 lease: UpkeepLease, caps: TenantCapper | None = None, slow: SlowSlots | None = None) -> None:
        """``slow`` (a cluster client's, streams.slow_slots): a partition whose master hangs, or whose round runs past
        the slow-call time, is skipped while that round ends in the background, so the others' retries are still
        promoted on time."""
        self._scripts = scripts
        self.lease = lease
        self._rounds = SlowRounds(slow, "upkeep")
        self._caps = caps
        self._workflows = workflows
        self._settings = settings
        self._partitions = partitions
        self._trimmed_at = 0.0

    async def run(self) -> None:
        """One round over every partition (trimming at most every TRIM_EVERY_S)."""
        now = time.monotonic()
        trim = now - self._trimmed_at >= TRIM_EVERY_S
        if trim:
            self._trimmed_at = now
        unpark = self._caps is not None and self._caps.unpark_due()
        failed: Exception | None = None
        if self._caps is not None:
            try:  # in partition 0's slot: its master away holds up no partition's upkeep
                await self._caps.agree()
            except Exception as exc:
                failed = exc
        for i, keys in enumerate(self._partitions):
            try:
                await self._rounds.run(i, slot_of(keys.results), lambda: self._partition(keys, trim=trim, unpark=unpark))
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    async def _partition(self, keys: Keys, *, trim: bool, unpark: bool) -> None:
        if not await self.lease.held(keys.upkeep):
            return
        if trim:
            await trim_lanes(self._scripts, keys)
            await trim_results(self._scripts, keys, keep=self._settings.results_maxlen, hard_cap=self._settings.results_hard_maxlen)
        await self._workflows.expire_due(keys)
        if unpark and self._caps is not None:
            await self._caps.unpark(keys)
        while True:
            moved = await self._scripts.promote(
                keys=[keys.delayed, keys.slot_guard], args=[PROMOTE_BATCH, keys.job_prefix, keys.lane_prefix]
            )
            if int(moved) < PROMOTE_BATCH:
                break
