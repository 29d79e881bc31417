"""Per-endpoint queues: each endpoint's deliveries wait in a FIFO and go out at the endpoint's own pace.

A delivery waiting in its endpoint's queue still holds the runtime slot of its
results (or due) entry, which stays pending in Redis: a crash loses nothing,
and the slots are the back-pressure on the read. An endpoint gets at most
``per_endpoint`` deliveries at once, in arrival order. Whether a new delivery
may join the queue depends on the endpoint:

- healthy (answers within ``SLOW_S``) and no other healthy endpoint (one that
  answered at least once) competing: what it serves in ``LONE_QUEUE_S`` at its
  measured latency (at least ``per_endpoint``), or every slot if that is more.
  A fast endpoint's queue may so take every slot, the read then waiting for it
  instead of reading deliveries only to park them; one answering just under
  ``SLOW_S`` holds only a few seconds of its work, the rest parked as below, so
  results for other endpoints behind its backlog are still read (another
  endpoint only competes once it has answered, which takes a read).
- healthy while others compete: up to its share of the slots (or what it
  drains in ``queue_wait_s``, if more). Beyond that it is told busy, with the
  time until one of its connections is free for it, and parked in the delayed set;
  :meth:`EndpointLimiter.tick` sends its newest waiters beyond the share away
  the same way, so a bottleneck never keeps every slot from the others.
- slow or stalled (an answer took longer than ``SLOW_S`` and a few fast ones
  have not followed, or nothing finished for that long): only what it drains in ``queue_wait_s`` at that latency
  (Little's law), nothing once it hangs; its waiting deliveries are sent away
  (parked) by :meth:`EndpointLimiter.tick`, so a hung endpoint never holds the
  slots every other endpoint needs.

Endpoints not yet proven healthy, those that have not earned their
connections yet (slow start, below) and those that are slow, are trusted
less, as a receiver can hang on many origins at once (ports of one host,
names under a wildcard DNS entry):

- slow start: one that has not answered yet gets one delivery in flight, and
  one more with each answer (a round of answers doubles them), up to
  ``per_endpoint``; the rest of its queue waits for those answers. Until it has
  so earned all its connections it is not proven: an origin answering once
  and then hanging would otherwise hang ``per_endpoint`` deliveries outside
  the budget below, and many such origins every slot.
- together they hold at most ``suspect_budget`` deliveries in flight (half the
  pool); beyond it their deliveries wait for room, and once half the budget is
  held by deliveries stalled past ``SLOW_S`` those waiting, and new ones, are
  parked instead, so hanging origins never hold the slots proven endpoints need.
- a proven endpoint that turns slow or stalls has its deliveries in flight
  counted in that budget from then on (:meth:`EndpointLimiter.tick`), so
  origins that hang after earning their connections fill it too.

Proof is history, and a receiver can build it: origins that earn their
connections and then all hang at once hold what they were given until the
attempt timeout. Between tenants that is bounded: a tenant's own webhooks (the
job's ``webhook``, not the operator's subscriptions) have at most its fair share
of the suspect budget in flight, ``suspect_budget // (tenants with deliveries
in flight + 1)`` (at least ``per_endpoint``); a delivery whose turn comes while
its tenant has that many is sent away (parked) instead of started, and one
arriving then is parked at once. One tenant's receivers hanging all at once so
fill at most half the budget, two a third each, and other tenants' endpoints,
proven or not, still start (the ``+ 1`` keeps a share for a tenant not yet
under way and for deliveries without one). A tenant whose one endpoint answers
never meets the bound: its connections are fewer than its share.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

INITIAL_LATENCY_S = 0.1
EWMA_WEIGHT = 0.2
SLOW_S = 1.0  # an endpoint slower than this is parked, not waited for
LONE_QUEUE_S = 2.0  # a healthy endpoint alone may queue what it serves in this long (every slot if that is more)
ACTIVE_S = 1.0  # an endpoint counts as active this long after its last arrival
MAX_TRACKED = 10_000
UNPROVEN_IN_FLIGHT = 1  # in flight at once to an endpoint that has not answered yet (slow start)


@dataclass(slots=True)
class EndpointQueue:
    """One endpoint: its waiting deliveries (FIFO of turn futures), turns under way, measured latency."""

    origin: str
    waiters: deque[tuple[asyncio.Future[bool], str]] = field(default_factory=deque)  # each turn with its tenant
    in_flight: int = 0
    held: int = 0  # admitted and not yet left: waiting or in flight
    leaving: int = 0  # of held, those sent away by tick that have not yet been told when to come back
    latency_s: float = INITIAL_LATENCY_S
    stalled_since: float = field(default_factory=time.monotonic)
    last_arrival: float = 0.0
    parked_until: float = 0.0  # when the last delivery parked for being over its share is due back
    answers: int = 0  # attempts finished, counted up to per_endpoint: each opens one more connection (slow start)
    suspect_in_flight: int = 0  # of in_flight, those counted in the suspect budget (started unproven, or it turned slow)

    @property
    def answered(self) -> bool:
        """An attempt finished: until then it does not count as competing for slots."""
        return self.answers > 0

    def latency(self, now: float) -> float:
        """The EWMA of answered attempts, raised to the age of the current stall while nothing finishes."""
        stall = now - self.stalled_since if self.in_flight else 0.0
        return max(self.latency_s, stall)

    def slow(self, now: float) -> bool:
        return self.latency(now) > SLOW_S

    def suspect(self, now: float, per_endpoint: int) -> bool:
        """Not proven healthy: it has not earned all its connections yet (slow start), or it is slow."""
        return not self.answered or self.connections(per_endpoint) < per_endpoint or self.slow(now)

    def connections(self, per_endpoint: int) -> int:
        """How many deliveries it may have in flight: one until it has answered, then one more per answer (slow
        start), so one answer never buys an origin that then hangs all ``per_endpoint`` connections at once."""
        return min(per_endpoint, UNPROVEN_IN_FLIGHT + self.answers)


@dataclass(frozen=True, slots=True)
class Busy:
    """A delivery an endpoint's queue will not take: why, and about how long until it could."""

    reason: str
    wait_s: float  # about when the queue could take it
    growing: bool = False  # a slow endpoint: wait at least the caller's delay growing with each park in a row


class EndpointLimiter:
    """FIFO queues per endpoint, ``per_endpoint`` in flight each; admission as the module docstring says."""

    def __init__(self, per_endpoint: int, *, pool: int, queue_wait_s: float) -> None:
        self.per_endpoint = per_endpoint
        self.pool = pool
        self.queue_wait_s = queue_wait_s
        self._queues: dict[str, EndpointQueue] = {}
        self._active: set[str] = set()  # healthy endpoints that answered, with an arrival in the last ACTIVE_S
        self.suspect_budget = max(per_endpoint, pool // 2)
        self._suspect_in_flight = 0
        self._suspects: set[str] = set()  # endpoints with deliveries counted in the suspect budget
        self._waiting_for_budget: dict[str, EndpointQueue] = {}  # in arrival order
        self._budget_hung = False  # half the budget is held by deliveries stalled past SLOW_S (see tick)
        self._tenant_in_flight: dict[str, int] = {}  # tenants with deliveries to their own webhooks in flight: how many

    def little(self, queue: EndpointQueue, now: float) -> int:
        """How many more it may queue: what ``per_endpoint`` connections drain in ``queue_wait_s`` at its latency."""
        return int(self.per_endpoint * self.queue_wait_s / max(queue.latency(now), 1e-3))

    def share(self) -> int:
        """Waiting room per active healthy endpoint when several compete for the slots (a slow one needs none)."""
        return self.pool // max(1, len(self._active))

    def room(self, queue: EndpointQueue, now: float) -> int | None:
        """How many a healthy endpoint may queue beyond its connections; None: no limit (the read waits for it).

        While others compete, its share (or what it drains in ``queue_wait_s``); alone, what it serves in
        ``LONE_QUEUE_S`` at its answers' latency (a stall is the slow rule's), no limit once that is the slots:
        else a receiver answering just under ``SLOW_S`` would hold every slot, and results for other endpoints
        would wait unread behind its whole backlog."""
        if len(self._active) > 1:
            return max(self.share(), self.little(queue, now))
        lone = max(self.per_endpoint, int(self.per_endpoint * LONE_QUEUE_S / max(queue.latency_s, 1e-3)))
        return None if lone >= self.pool else lone

    def tenant_share(self, tenant: str) -> int:
        """How many deliveries to its own webhooks ``tenant`` may have in flight: its fair share of the suspect budget."""
        under_way = len(self._tenant_in_flight) + (tenant not in self._tenant_in_flight)
        return max(self.per_endpoint, self.suspect_budget // (under_way + 1))

    def _tenant_full(self, tenant: str) -> bool:
        return bool(tenant) and self._tenant_in_flight.get(tenant, 0) >= self.tenant_share(tenant)

    def _tenant_busy(self, tenant: str) -> Busy:
        return Busy(f"this job's tenant has {self._tenant_in_flight.get(tenant, 0)} deliveries to its webhooks in flight, "
                    f"its share of the {self.suspect_budget} allowed endpoints not proven healthy", SLOW_S, growing=True)

    def enter(self, origin: str, *, returning: bool = False, tenant: str = "") -> EndpointQueue | Busy:
        """Admit one delivery (it must call :meth:`leave`), or say why not.

        ``returning``: it was parked before and its time has come; a healthy endpoint takes it past its share
        (those come back at the endpoint's pace, so they do not pile up), and parks the new ones instead.
        ``tenant``: a delivery to the job's own webhook names the job's tenant, held to :meth:`tenant_share` in flight.
        """
        now = time.monotonic()
        queue = self._queues.get(origin)
        if queue is None:
            if len(self._queues) >= MAX_TRACKED:
                self._forget_idle()
            queue = self._queues[origin] = EndpointQueue(origin)
        queue.last_arrival = now
        slow = queue.slow(now)
        if queue.answered and not slow:
            self._active.add(origin)
        if queue.suspect(now, self.per_endpoint) and self._budget_hung and self._suspect_in_flight >= self.suspect_budget:
            return Busy(f"{origin} is not proven healthy and such endpoints hold all {self.suspect_budget} connections "
                        "allowed them, most of them stalled", SLOW_S, growing=True)
        waiting = queue.held - queue.connections(self.per_endpoint)
        if waiting >= 0:
            if slow:
                if waiting >= self.little(queue, now):
                    latency = queue.latency(now)
                    return Busy(f"{origin} is slow ({latency:.1f}s) with {queue.held} deliveries under way", latency, growing=True)
            elif not returning and (room := self.room(queue, now)) is not None and waiting >= room:
                return Busy(self._over_room(queue), self._come_back_s(queue, now, ahead=queue.held - queue.leaving))
        if self._tenant_full(tenant):
            return self._tenant_busy(tenant)
        queue.held += 1
        return queue

    async def turn(self, queue: EndpointQueue, tenant: str = "") -> bool:
        """Wait for this delivery's turn (FIFO); False when it was sent away (the endpoint turned slow, over its share,
        or its ``tenant`` had its share in flight when the turn came): then :meth:`sent_away` says why."""
        if not queue.waiters and self._may_start(queue, time.monotonic()):
            if self._tenant_full(tenant):
                queue.leaving += 1
                return False
            self._start(queue, tenant)
            return True
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue.waiters.append((turn, tenant))
        self._note_blocked(queue)
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                if turn.result():
                    self.finished(queue, None, tenant)  # granted, never used: pass it on
                else:
                    queue.leaving -= 1  # sent away, never to ask when to come back
            else:
                try:
                    queue.waiters.remove((turn, tenant))
                except ValueError:
                    pass
            raise

    def _may_start(self, queue: EndpointQueue, now: float) -> bool:
        if queue.in_flight >= queue.connections(self.per_endpoint):
            return False
        return not queue.suspect(now, self.per_endpoint) or self._suspect_in_flight < self.suspect_budget

    def _note_blocked(self, queue: EndpointQueue) -> None:
        """A queue whose waiters wait for room in the suspect budget (not for its own connections) is woken by
        whichever suspect delivery ends first."""
        if queue.waiters and queue.in_flight < queue.connections(self.per_endpoint):
            self._waiting_for_budget.setdefault(queue.origin, queue)
        else:  # its waiters wait for its own connections now (it answered, or it has none waiting)
            self._waiting_for_budget.pop(queue.origin, None)

    def _start(self, queue: EndpointQueue, tenant: str = "") -> None:
        now = time.monotonic()
        if tenant:
            self._tenant_in_flight[tenant] = self._tenant_in_flight.get(tenant, 0) + 1
        if queue.in_flight == 0:
            queue.stalled_since = now
        queue.in_flight += 1
        if queue.suspect(now, self.per_endpoint):
            self._count_as_suspect(queue, 1)

    def _count_as_suspect(self, queue: EndpointQueue, more: int | None = None) -> None:
        """Count ``more`` of its deliveries in flight in the suspect budget (None: all those not counted yet).

        A proven endpoint that stalls counts there too: its deliveries were started while it answered, and
        held outside the budget they would leave it to other hanging origins, whose earned connections together
        could hold every slot."""
        more = queue.in_flight - queue.suspect_in_flight if more is None else more
        queue.suspect_in_flight += more
        self._suspect_in_flight += more
        self._suspects.add(queue.origin)

    def _dispatch(self, queue: EndpointQueue) -> None:
        """Start its waiters, first come first, while it and the budget have room."""
        now = time.monotonic()
        while queue.waiters and self._may_start(queue, now):
            turn, tenant = queue.waiters.popleft()
            if turn.done():
                continue
            if self._tenant_full(tenant):  # sent away, so the waiters behind it (other tenants') are not held up
                queue.leaving += 1
                turn.set_result(False)
                continue
            self._start(queue, tenant)
            turn.set_result(True)
        self._note_blocked(queue)

    def finished(self, queue: EndpointQueue, seconds: float | None, tenant: str = "") -> None:
        """The turn is over (``seconds`` the attempt took, None if none was made); the next waiter goes."""
        queue.in_flight -= 1
        if tenant:
            if (left := self._tenant_in_flight[tenant] - 1) > 0:
                self._tenant_in_flight[tenant] = left
            else:
                del self._tenant_in_flight[tenant]
        if queue.suspect_in_flight > queue.in_flight:
            queue.suspect_in_flight -= 1
            self._suspect_in_flight -= 1
            if not queue.suspect_in_flight:
                self._suspects.discard(queue.origin)
        if seconds is not None:  # one slow answer (a timeout, say) marks it slow at once; fast ones bring it back
            if seconds > SLOW_S:
                queue.latency_s = max(seconds, queue.latency_s)
            else:
                queue.latency_s += EWMA_WEIGHT * (seconds - queue.latency_s)
            queue.answers = min(queue.answers + 1, self.per_endpoint)
        queue.stalled_since = time.monotonic()
        self._dispatch(queue)
        while self._waiting_for_budget and self._suspect_in_flight < self.suspect_budget:
            origin, blocked = next(iter(self._waiting_for_budget.items()))
            del self._waiting_for_budget[origin]
            self._dispatch(blocked)
            if origin in self._waiting_for_budget:  # still blocked: the budget is full again
                break

    @staticmethod
    def leave(queue: EndpointQueue) -> None:
        queue.held -= 1

    def tick(self) -> int:
        """Forget endpoints idle past ``ACTIVE_S``; count the deliveries in flight of queues turned slow in the
        suspect budget; send away the waiters of slow queues, and the newest waiters of a queue over its room (its
        share while others compete). Returns how many were sent away."""
        now = time.monotonic()
        self._active = {o for o in self._active
                        if (queue := self._queues.get(o)) is not None and now - queue.last_arrival < ACTIVE_S and not queue.slow(now)}
        for queue in self._queues.values():
            if queue.in_flight > queue.suspect_in_flight and queue.slow(now):
                self._count_as_suspect(queue)
        stalled = sum(q.suspect_in_flight for o in self._suspects if (q := self._queues.get(o)) is not None and q.slow(now))
        self._budget_hung = stalled >= self.suspect_budget // 2
        sent_away = 0
        for queue in self._queues.values():
            if not queue.waiters:
                continue
            parked_for_budget = self._budget_hung and queue.origin in self._waiting_for_budget and queue.suspect(now, self.per_endpoint)
            keep = 0 if queue.slow(now) or parked_for_budget else self.room(queue, now)
            if keep is None or len(queue.waiters) <= keep:
                continue
            newest = [queue.waiters.pop() for _ in range(len(queue.waiters) - keep)]  # the oldest keep their place
            for turn, _ in reversed(newest):  # told oldest first, so they are parked, and come back, in their order
                if not turn.done():
                    turn.set_result(False)
                    queue.leaving += 1
                    sent_away += 1
        return sent_away

    def sent_away(self, queue: EndpointQueue, tenant: str = "") -> Busy:
        """Why a waiting delivery was sent away, and when to bring it back."""
        now = time.monotonic()
        queue.leaving -= 1
        if self._tenant_full(tenant):
            return self._tenant_busy(tenant)
        if queue.suspect(now, self.per_endpoint) and self._budget_hung:
            return Busy(f"{queue.origin} is not proven healthy and such endpoints hold all {self.suspect_budget} "
                        "connections allowed them, most of them stalled", SLOW_S, growing=True)
        if queue.slow(now):
            return Busy(f"{queue.origin} turned slow ({queue.latency(now):.1f}s) while this delivery waited", queue.latency(now), growing=True)
        return Busy(self._over_room(queue), self._come_back_s(queue, now, ahead=queue.held - 1 - queue.leaving))

    def _over_room(self, queue: EndpointQueue) -> str:
        if len(self._active) > 1:
            return f"{queue.origin} has {queue.held} deliveries queued while other endpoints wait"
        return f"{queue.origin} has {queue.held} deliveries queued, more than it serves in {LONE_QUEUE_S:g}s"

    def _come_back_s(self, queue: EndpointQueue, now: float, *, ahead: int) -> float:
        """When a delivery parked now should come back: when a connection is free for it, after the ``ahead``
        deliveries still in its queue (in flight or waiting; not those sent away with it) and every one parked
        before it, one turn apart at the endpoint's rate, so they return in order, each as it can be started.

        Its connections take the first of those ahead at once, so one is free for it once ``ahead - connections
        + 1`` have finished. Counting every one ahead as a turn (and those sent away with it as ahead) brought each
        parked delivery back a whole latency late, a run sent away together a turn later still for each of them,
        the endpoint's connections unused meanwhile."""
        turn_s = queue.latency_s / self.per_endpoint
        free_at = now + max(0, ahead - queue.connections(self.per_endpoint)) * turn_s
        queue.parked_until = max(free_at, queue.parked_until) + turn_s
        return queue.parked_until - now

    def _forget_idle(self) -> None:
        for origin in [o for o, queue in self._queues.items() if queue.held == 0]:
            del self._queues[origin]
            self._active.discard(origin)
            self._waiting_for_budget.pop(origin, None)
