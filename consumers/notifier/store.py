"""The notifier's Redis side: pending deliveries, the delayed set, the due stream, dead letters.

A delivery that must wait (a retry, or an endpoint that is busy) is a JSON
member of ``<prefix>:webhooks:delayed`` scored by its due time in epoch ms,
never a sleeping task. When it is due, ``promote`` moves it atomically to the
``<prefix>:webhooks:due`` stream, which the ``notifier`` group reads beside the
results stream, so a due retry has a lease and is reclaimed like any entry if
its notifier dies. ``commit`` settles one entry atomically: schedule its
retries, write its dead letters, XACK it, and XDEL it only from the due stream
(the results stream belongs to every group that reads it: never deleted here).

A ``Store`` serves one partition (contract §10): every script names all its
keys in KEYS, all of that partition, so on Redis Cluster each runs in one slot.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from streams.keys import Keys
from streams.scripts import RECEIPT_TTL_MS, NodeScript, receipt_token

PROMOTE_BATCH = 500

# A pending delivery, as stream fields and (with a nonce) as a delayed-set member.
DELIVERY_FIELDS = ("id", "url", "event", "attempts", "last_status", "error")

COMMIT_LUA = """
-- KEYS: results, due, delayed, dead, this call's receipt; ARGV: group, consumer, the receipt's ms, then per entry:
--   which ('r' results | 'd' due), entry_id, n_delayed, (delay_ms member)*, n_dead, (n_fields (k v)*)*
-- A delayed member is due delay_ms from now by Redis' clock, which PROMOTE_LUA reads too: notifiers' clocks may differ.
-- Only an entry this consumer still owns is settled (a reclaimed one is the new owner's).
-- Returns 1 per entry settled, 0 per entry no longer ours. A copy of the call (redis-py sends one after a lost
-- reply; a stalled Redis runs both) answers what the first said, from its receipt: not 0 for entries it acked.
local kept = redis.call('GET', KEYS[5])
if kept then return cjson.decode(kept) end
local group, consumer = ARGV[1], ARGV[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local out = {}
local i = 4
while i <= #ARGV do
  local stream = ARGV[i] == 'd' and KEYS[2] or KEYS[1]
  local eid = ARGV[i + 1]
  local p = redis.call('XPENDING', stream, group, eid, eid, 1)
  local mine = p[1] ~= nil and p[1][2] == consumer
  local nd = tonumber(ARGV[i + 2])
  i = i + 3
  for _ = 1, nd do
    if mine then redis.call('ZADD', KEYS[3], now + tonumber(ARGV[i]), ARGV[i + 1]) end
    i = i + 2
  end
  local nx = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, nx do
    local nf = tonumber(ARGV[i])
    if mine then
      local flat = {}
      for k = 1, 2 * nf do flat[k] = ARGV[i + k] end
      redis.call('XADD', KEYS[4], '*', unpack(flat))
    end
    i = i + 1 + 2 * nf
  end
  if mine then
    redis.call('XACK', stream, group, eid)
    if stream == KEYS[2] then redis.call('XDEL', stream, eid) end
  end
  out[#out + 1] = mine and 1 or 0
end
if #out > 0 then redis.call('SET', KEYS[5], cjson.encode(out), 'PX', ARGV[3]) end
return out
"""

PROMOTE_LUA = """
-- KEYS: delayed, due; ARGV: limit. Moves members due by Redis' clock (COMMIT_LUA's) to the due stream; returns how many.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  local ok, item = pcall(cjson.decode, member)
  if ok and type(item) == 'table' and item.url then
    local flat = {}
    for k, v in pairs(item) do
      if k ~= 'n' then
        flat[#flat + 1] = k
        flat[#flat + 1] = tostring(v)
      end
    end
    redis.call('XADD', KEYS[2], '*', unpack(flat))
  end
end
return #due
"""

REPLAY_LUA = """
-- KEYS: webhooks dead, due; ARGV: dead entry id. Re-queues it with a fresh attempt budget; returns the new id or false.
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #found == 0 then return false end
local keep = {id = true, url = true, event = true, last_status = true, error = true, tenant = true}
local f = found[1][2]
local flat = {'attempts', '0'}
for j = 1, #f, 2 do
  if keep[f[j]] then
    flat[#flat + 1] = f[j]
    flat[#flat + 1] = f[j + 1]
  end
end
local new_id = redis.call('XADD', KEYS[2], '*', unpack(flat))
redis.call('XDEL', KEYS[1], ARGV[1])
return new_id
"""


def due_stream(keys: Keys) -> str:
    """Stream of deliveries whose time has come (internal; under the prefix like every key)."""
    return keys.webhooks_due


@dataclass(slots=True)
class Pending:
    """One event still to deliver to one URL.

    ``attempts`` counts the attempts already made; ``deferred`` how many times
    in a row it was parked because its endpoint was busy (it spaces them out);
    ``tenant`` is the job's on a delivery to the job's own webhook ('' otherwise:
    a subscription is the operator's), held to the tenant's share of the slots.
    """

    id: str
    url: str
    event: str
    attempts: int = 0
    last_status: str = ""
    error: str = ""
    deferred: int = 0
    tenant: str = ""

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> Pending:
        return cls(raw.get("id", ""), raw.get("url", ""), raw.get("event", "{}"), _int(raw.get("attempts")),
                   raw.get("last_status", ""), raw.get("error", ""), _int(raw.get("deferred")), raw.get("tenant", ""))

    def member(self) -> str:
        """A delayed-set member; the nonce keeps two identical waits apart. Text a peer sent that is not UTF-8 (lone
        surrogates, as aiohttp reads such header bytes) goes in replaced: orjson refuses it, and the retry was lost."""
        fields = {
            "id": self.id, "url": self.url, "event": self.event, "attempts": str(self.attempts),
            "last_status": self.last_status, "error": self.error, "deferred": str(self.deferred),
            **({"tenant": self.tenant} if self.tenant else {}), "n": secrets.token_hex(6),
        }
        try:
            return orjson.dumps(fields).decode()
        except orjson.JSONEncodeError:
            return orjson.dumps({k: v.encode("utf-8", "replace").decode() for k, v in fields.items()}).decode()


def _int(value: str | None) -> int:
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


@dataclass(slots=True)
class CommitOp:
    """How one entry (results or due) is settled: retries to park, dead letters to write, then XACK."""

    stream: str
    entry_id: str
    delayed: list[tuple[int, str]] = field(default_factory=list)  # (delay ms from when it is written, member)
    dead: list[dict[str, str]] = field(default_factory=list)

    def args(self, due_key: str) -> list[Any]:
        out: list[Any] = ["d" if self.stream == due_key else "r", self.entry_id, len(self.delayed)]
        for delay_ms, member in self.delayed:
            out += [max(0, delay_ms), member]
        out.append(len(self.dead))
        for letter in self.dead:
            out.append(len(letter))
            for k, v in letter.items():
                out += [k, v]
        return out


class Store:
    """The notifier's scripts bound to one client and one prefix."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self.due = due_stream(keys)
        # NodeScript: on a cluster a NOSCRIPT loads the script on the keys' master only, not on every master (one that
        # hangs would hold up the first commit on another)
        self._commit: AsyncScript = NodeScript(redis, COMMIT_LUA)
        self._promote: AsyncScript = NodeScript(redis, PROMOTE_LUA)
        self._replay: AsyncScript = NodeScript(redis, REPLAY_LUA)

    async def commit(self, ops: list[CommitOp], *, group: str, consumer: str) -> list[bool]:
        args: list[Any] = [group, consumer, RECEIPT_TTL_MS]
        for op in ops:
            args += op.args(self.due)
        keys = [self.keys.results, self.due, self.keys.webhooks_delayed, self.keys.webhooks_dead, self.keys.receipt(receipt_token())]
        reply = await self._commit(keys=keys, args=args)
        return [bool(int(x)) for x in reply]

    async def promote(self) -> int:
        """Move every delivery due by Redis' clock to the due stream (atomic per batch; any notifier may run it)."""
        total = 0
        while True:
            moved = int(await self._promote(keys=[self.keys.webhooks_delayed, self.due], args=[PROMOTE_BATCH]))
            total += moved
            if moved < PROMOTE_BATCH:
                return total

    async def replay(self, entry_id: str) -> str | None:
        new_id = await self._replay(keys=[self.keys.webhooks_dead, self.due], args=[entry_id])
        return str(new_id) if new_id else None
