"""The ``notifier`` group's :class:`~streams.runtime.EntryHandler`: results in, webhook deliveries out.

Each results entry fans out to its job's ``webhook`` and the matching
subscriptions; each due-stream entry is one delivery coming back for another
attempt. Each delivery waits its turn in its endpoint's queue (``limiter.py``)
while its entry stays pending, then ends delivered, parked in the delayed set
(retry, or endpoint busy) or dead-lettered, and the entry is committed (XACK)
once all of its deliveries have, in one atomic script.

With partitions (contract §10) the runtime reads every served partition's due
and results streams; each entry is committed, and its retries parked, in its
own partition (the :class:`Store` of its stream), while its deliveries share
the endpoint queues with those of every other partition.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import orjson

from consumers.notifier import metrics
from consumers.notifier.committer import Committer
from consumers.notifier.delivery import Attempt, Deliverer, Kind
from consumers.notifier.metrics import Outcome
from consumers.notifier.settings import NotifierSettings, Subscription
from consumers.notifier.ssrf import MAX_URL_CHARS
from consumers.notifier.store import CommitOp, Pending, Store
from streams.envelope import JobResult, now_ms
from streams.errors import DecodeError
from streams.hold import until_refill
from streams.raw import not_utf8, repaired_fields
from streams.runtime import Entry, GroupRuntime, Slot
from streams.scripts import Scripts
from streams.sizes import short
from streams.strict_json import ints_as_json, json_bytes
from streams.slow_slots import SlowRounds, slot_of
from streams.upkeep import UpkeepLease
from streams.urls import loggable_url

log = logging.getLogger("streamcrew.notifier")

BUSY_DELAY_S = 0.5  # first wait of a delivery parked because its endpoint is busy; doubled each time in a row
BUSY_DELAY_MAX_S = 30.0
CAP_SPREAD = 0.5  # a park that reaches the cap comes back between this fraction of it and the cap, spread at random
SUMMARY_S = 10.0
ID_LOGGED = 200  # a raw result's id has no length bound: a log line quotes its start


@dataclass(slots=True)
class Decision:
    """Where one delivery goes after its attempt: nowhere (delivered), the delayed set, or the dead letters."""

    delayed: tuple[int, str] | None = None  # (delay ms, member): due by Redis' clock (store.COMMIT_LUA)
    dead: dict[str, str] | None = None
    outcome: Outcome | None = None  # counted once the commit is written


@dataclass(slots=True)
class Work:
    stream: str
    entry_id: str
    pending: list[Pending]
    decisions: list[Decision | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.decisions = [None] * len(self.pending)


def event_json(raw: dict[str, str]) -> str:
    """The webhook body: the result event as a JSON object, ``result`` and ``usage`` parsed (contract §7)."""
    try:
        event = JobResult.from_fields(raw).to_json_dict()
        return orjson.dumps(event).decode()
    except DecodeError:
        return orjson.dumps(raw).decode()  # malformed but still a result: deliver what there is
    except orjson.JSONEncodeError:
        try:
            if ints_as_json(event) != event:  # an integer past 64 bits (a raw XADD's): its fields as written
                return orjson.dumps(raw).decode()
            return json_bytes(event).decode()  # nested past orjson's depth (a workflow's result around a deep step's)
        except RecursionError:  # past Python's own depth too (a raw XADD's 900 levels): as written, never a stuck read
            return orjson.dumps(raw).decode()


def targets(raw: dict[str, str], subscriptions: list[Subscription]) -> list[str]:
    """The job's own webhook, then every subscription matching its agent and status; each URL once."""
    urls = [raw["webhook"].strip()] if raw.get("webhook", "").strip() else []
    agent, status = raw.get("agent", ""), raw.get("status", "")
    urls += [s.url for s in subscriptions if s.matches(agent, status)]
    return list(dict.fromkeys(urls))


def capped(wait_s: float) -> float:
    """A busy park's wait, at most ``BUSY_DELAY_MAX_S``; one that reaches the cap comes back at a random time in the
    last half of it. Deliveries parked together (a burst, each parked several times in a row, or a healthy
    endpoint's run beyond 30 s of its work) all reached the cap at once and came back, and were parked again, as
    one herd every 30 s, taking up the read while other endpoints' results waited; spread, they come back a few
    at a time."""
    if wait_s < BUSY_DELAY_MAX_S:
        return wait_s
    return BUSY_DELAY_MAX_S * random.uniform(CAP_SPREAD, 1.0)


def loggable(url: str) -> str:
    """The URL without query or credentials (tokens often ride in query strings); one over the limit unparsed."""
    if len(url) > MAX_URL_CHARS:  # refused unparsed: urlsplit's own cache would keep it
        return f"(URL of {len(url):,} characters)"
    return loggable_url(url)


class NotifierHandler:
    """Delivers what the runtime reads from every partition's ``[due stream, results]``; settles through the :class:`Committer`."""

    def __init__(self, stores: Sequence[Store], settings: NotifierSettings, runtime: GroupRuntime, deliverer: Deliverer) -> None:
        self.stores = tuple(stores)
        self.settings = settings
        self.runtime = runtime
        self.deliverer = deliverer
        self.committer = Committer(self.stores, group=runtime.group, consumer=runtime.consumer, release=runtime.release,
                                   hold=until_refill(runtime), hold_s=runtime.refill_wait_s / 2)
        self._due_streams = frozenset(store.due for store in self.stores)
        self._promotions = SlowRounds(runtime.slow, "webhook promotion")  # a hung master holds up only its partitions'
        # one notifier at a time moves a partition's due retries (streams.upkeep): the lease's holder
        self.promotion_lease = UpkeepLease(Scripts(runtime.redis), runtime.consumer)
        self._work: dict[Slot, Work] = {}
        self._tally: dict[Kind, int] = {}
        self._tally_since = time.monotonic()
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        if reclaimed:
            metrics.reclaimed("webhooks:due" if stream in self._due_streams else "results").inc(len(entries))
        for entry_id, raw in entries:
            pending = self._plan(stream, entry_id, raw) if raw is not None else []
            if not pending:
                self.committer.submit(CommitOp(stream, entry_id))
                continue
            work = Work(stream, entry_id, pending)
            self._work[(stream, entry_id)] = work
            self.runtime.attach(stream, entry_id, asyncio.create_task(self._run(work)))

    def _plan(self, stream: str, entry_id: str, raw: dict[str, str]) -> list[Pending]:
        if not_utf8(raw):  # a raw XADD's bytes: no JSON body (or header) could carry them, so U+FFFD in their place
            raw = repaired_fields(raw)
        if stream in self._due_streams:
            one = Pending.from_fields(raw)
            return [one] if one.url else []
        urls = targets(raw, self.settings.subscriptions)
        if not urls:
            return []
        event = event_json(raw)
        job_id = raw.get("id") or entry_id
        own, tenant = raw.get("webhook", "").strip(), raw.get("tenant", "")
        return [Pending(job_id, url, event, tenant=tenant if url == own else "") for url in urls]

    async def _run(self, work: Work) -> None:
        if len(work.pending) == 1:  # the common case: no task of its own for the one delivery
            await self._one(work, 0)
        else:
            await asyncio.gather(*(self._one(work, i) for i in range(len(work.pending))))
        self._submit(work, work.decisions)

    async def _one(self, work: Work, i: int) -> None:
        p = work.pending[i]
        try:
            attempt = await self.deliverer.deliver(p.url, p.id, p.event.encode(), returning=p.deferred > 0, tenant=p.tenant)
            work.decisions[i] = self._decide(p, attempt)
        except Exception as exc:  # a fault of ours: an attempt that failed, never an entry's slot held for good, unlogged
            log.error("unexpected %s delivering webhook job=%s url=%s; counted as a failed attempt (no traceback: it may "
                      "quote the URL)", type(exc).__name__, short(p.id, ID_LOGGED), loggable(p.url))
            work.decisions[i] = self._decide(p, Attempt(Kind.RETRY, error=f"internal error: {type(exc).__name__}"))

    def _decide(self, p: Pending, a: Attempt) -> Decision:
        attempts = p.attempts + (1 if a.made else 0)
        status = str(a.status) if a.status is not None else ""
        self._tally[a.kind] = self._tally.get(a.kind, 0) + 1
        # Deliveries are the routine: one line each at debug, a summary every SUMMARY_S; anything else at info.
        level = logging.DEBUG if a.kind in (Kind.DELIVERED, Kind.BUSY) else logging.INFO
        if log.isEnabledFor(level):
            # A failed attempt that was the last one allowed is logged as what came of it (a dead letter), not "retry"
            told = "failed" if a.kind is Kind.RETRY and attempts >= self.settings.max_attempts else a.kind
            log.log(level, "webhook job=%s url=%s attempt=%d outcome=%s status=%s seconds=%.3f%s", short(p.id, ID_LOGGED), loggable(p.url),
                    attempts, told, status or "-", a.seconds, f" error={a.error!r}" if a.error else "")
        if a.kind is Kind.DELIVERED:
            metrics.deliveries(Outcome.DELIVERED).inc()
            return Decision()
        if a.kind is Kind.BUSY:  # not an attempt: parked until its queue could take it, or further off each time
            later = replace(p, deferred=p.deferred + 1)
            if a.backing_off or a.retry_after_s is None:  # a slow endpoint: spaced out, further each time in a row
                growing = BUSY_DELAY_S * 2.0 ** min(p.deferred, 10) * random.uniform(0.75, 1.25)
                wait_s = capped(max(growing, a.retry_after_s or 0.0))
            else:  # a healthy one over its share: back when its turn comes, in order
                wait_s = capped(a.retry_after_s)
            return Decision(delayed=(int(wait_s * 1000), later.member()))
        if a.kind is Kind.REFUSED:
            return Decision(dead=self._dead(p, attempts, status, a.error), outcome=Outcome.REFUSED)
        if a.kind is Kind.GONE or attempts >= self.settings.max_attempts:
            error = a.error if a.kind is Kind.GONE else f"{a.error} (attempt {attempts} of {self.settings.max_attempts})"
            return Decision(dead=self._dead(p, attempts, status, error), outcome=Outcome.FAILED)
        delay_s = max(a.retry_after_s or 0.0, self.backoff_s(attempts))  # more time when asked, never less (Retry-After: 0)
        later = replace(p, attempts=attempts, last_status=status, error=a.error, deferred=0)
        return Decision(delayed=(int(delay_s * 1000), later.member()), outcome=Outcome.RETRIED)

    def backoff_s(self, attempts: int) -> float:
        """Delay after the ``attempts``-th failure: ``backoff_s`` doubled each time, capped, times 0.5-1 jitter."""
        base = self.settings.backoff_s * 2.0 ** min(attempts - 1, 40)
        return min(self.settings.backoff_max_s, base) * random.uniform(0.5, 1.0)

    @staticmethod
    def _dead(p: Pending, attempts: int, status: str, error: str) -> dict[str, str]:
        return {"id": p.id, "url": p.url, "attempts": str(attempts), "last_status": status,
                "error": error, "dead_at": str(now_ms()), "event": p.event, **({"tenant": p.tenant} if p.tenant else {})}

    def _submit(self, work: Work, decisions: list[Decision | None]) -> None:
        self._work.pop((work.stream, work.entry_id), None)
        op = CommitOp(work.stream, work.entry_id)
        outcomes: list[Outcome] = []
        for p, d in zip(work.pending, decisions, strict=True):
            if d is None:  # interrupted by the drain: due again at once, the attempt not counted
                d = Decision(delayed=(0, p.member()))
            if d.delayed is not None:
                op.delayed.append(d.delayed)
            if d.dead is not None:
                op.dead.append(d.dead)
            if d.outcome is not None:
                outcomes.append(d.outcome)

        def written(wrote: bool) -> None:
            if wrote:
                for outcome in outcomes:
                    metrics.deliveries(outcome).inc()

        self.committer.submit(op, written)

    async def tick(self) -> None:
        """Move due deliveries to each partition's due stream (the notifier holding the partition's lease does: the
        others ask for it once a second, streams.upkeep; the script is atomic); log the summary. A partition whose
        master hangs is skipped while its promotion ends in the background (streams.slow_slots)."""
        self.deliverer.limiter.tick()
        failed: Exception | None = None
        for i, store in enumerate(self.stores):  # one partition failing, or whose master hangs, holds up no other's
            try:
                await self._promotions.run(i, slot_of(store.keys.webhooks_delayed), lambda: self._promote(store))
            except Exception as exc:
                failed = failed or exc
        if time.monotonic() - self._tally_since >= SUMMARY_S:
            self.summary()
        if failed is not None:
            raise failed

    async def _promote(self, store: Store) -> None:
        if await self.promotion_lease.held(store.keys.webhooks_upkeep):
            await store.promote()

    def summary(self) -> None:
        """Log the outcomes since the last summary (every ``SUMMARY_S``, and once more at stop)."""
        now = time.monotonic()
        if self._tally:
            counts = " ".join(f"{kind}={n}" for kind, n in sorted(self._tally.items()))
            log.info("webhooks in the last %.0fs: %s in_flight=%d", now - self._tally_since, counts, self.runtime.in_flight)
        self._tally = {}
        self._tally_since = now

    async def taken_over(self, slots: list[Slot]) -> None:
        """Deliveries another notifier took over go on here too: webhooks are at least once, and the receiver
        dedupes by ``webhook-id``; stopping ours would only risk a slower copy."""

    async def hand_back(self, slots: list[Slot]) -> int:
        """Drain: deliveries still under way are parked as due now, so another notifier takes them at once."""
        parked = 0
        for slot in slots:
            work = self._work.get(slot)
            if work is not None:
                self._submit(work, work.decisions)
                parked += 1
        await self.committer.flush()
        return parked
