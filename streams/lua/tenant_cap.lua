-- Per-tenant caps on running jobs (streams/tenant_cap.py), shared by start.lua, settle.lua, unpark.lua and cap_renew.lua.
-- Keys of a partition, from its '<prefix>:' (the job prefix less 'job:'), so they share its hash slot:
--   <prefix>:tenant:running:<tenant>  sorted set: job id -> deadline (Redis TIME ms) of a run or of a reservation; a
--                                     member past its deadline is stale (its worker died) and dropped before counting
--   <prefix>:tenant:parked:<tenant>   list, oldest first: JSON {lane, id, fields} of jobs over the cap, acked off their lane
--   <prefix>:tenants-parked           hash: tenant -> how many it has parked (what upkeep walks and stats sums)
local function tc_base(job_prefix) return string.sub(job_prefix, 1, #job_prefix - 4) end
local function tc_running(base, tenant) return base .. 'tenant:running:' .. tenant end
local function tc_parked(base, tenant) return base .. 'tenant:parked:' .. tenant end
local function tc_tenants(base) return base .. 'tenants-parked' end
-- The resumed stream's name ('resumed-<lane>', streams.keys.RESUMED) for a job that waited its turn in a lane once: let go
-- from a parked list, or handed back by a draining worker. Workers read it just before the lane.
local function resumed_of(name) return 'resumed-' .. (string.gsub(name, '^resumed%-', '')) end
local function tc_now() return now_ms() end  -- groups.lua's
-- Whether the job still has its entry in its lane, for the workers group to run: not yet delivered, or pending with a
-- worker (the record's source names the entry: '<lane>/<entry ID>'). Needs groups.lua (as_table, id_older).
local function tc_waiting(job_prefix, lane_prefix, jid)
  local lane, eid = string.match(redis.call('HGET', job_prefix .. jid, 'source') or '', '^([%w_-]+)/(%d+%-%d+)$')
  if not lane then return false end  -- parked, a retry waiting its time, skipped, or no record: no entry to come
  local stream = lane_prefix .. lane
  local ok, pending = pcall(redis.call, 'XPENDING', stream, 'workers', eid, eid, 1)
  if not ok then return false end  -- no lane or no group: nothing will read it
  if #pending > 0 then return true end
  if #redis.call('XRANGE', stream, eid, eid) == 0 then return false end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = as_table(g)
    if info['name'] == 'workers' then return id_older(info['last-delivered-id'], eid) end
  end
  return false
end
-- How many of the tenant's jobs hold a slot. A member past its deadline is checked before it counts: while its job
-- still has its entry in its lane (tc_waiting) it keeps the slot, looked at again recheck_ms later; else it is dropped.
-- So a job moved back to a lane whose backlog takes longer than its reservation still finds its slot when a worker
-- reaches it (dropping it would give the slot to the tenant's next parked job, and the late one would be parked again,
-- for as long as the backlog lasted), and a dead worker's run keeps its slot until it is reclaimed and run again.
local function tc_count(running, now, job_prefix, lane_prefix, recheck_ms)
  for _, jid in ipairs(redis.call('ZRANGEBYSCORE', running, '-inf', '(' .. now)) do
    if tc_waiting(job_prefix, lane_prefix, jid) then
      redis.call('ZADD', running, now + recheck_ms, jid)
    else
      redis.call('ZREM', running, jid)
    end
  end
  return redis.call('ZCARD', running)
end
-- Park a job over its tenant's cap; returns the record's source that names the parked item (what un-parking checks).
local function tc_park(base, tenant, lane, jid, fields)
  for i = 1, #fields, 2 do if fields[i] == 'id' then fields[i + 1] = jid end end  -- a renamed id-less job ('<lane>:<id>')
  local item = cjson.encode({lane = lane, id = jid, fields = fields})
  local n = redis.call('RPUSH', tc_parked(base, tenant), item)
  redis.call('HSET', tc_tenants(base), tenant, n)
  return 'parked:' .. redis.sha1hex(item)
end
-- Let go the tenant's oldest parked jobs while they fit under cap (cap 0: no cap any more, at most limit of them), each
-- to its lane's resumed stream ('<prefix>:requests:resumed-<lane>', which workers read just before the lane: it already
-- waited its turn in the lane once). Each takes a slot at once, a reservation held reserve_ms, so that its start runs it
-- rather than parking it again. A parked job whose record no longer names its item (another run of that id) is dropped.
local function tc_unpark(job_prefix, lane_prefix, tenant, cap, now, reserve_ms, limit)
  local base = tc_base(job_prefix)
  local running, parked = tc_running(base, tenant), tc_parked(base, tenant)
  local n = cap > 0 and tc_count(running, now, job_prefix, lane_prefix, reserve_ms) or 0
  local moved = 0
  while (cap <= 0 or n < cap) and moved < limit do
    local item = redis.call('LPOP', parked)
    if not item then break end
    local ok, p = pcall(cjson.decode, item)
    if ok and type(p) == 'table' and p.lane and p.id and type(p.fields) == 'table' then
      local key = job_prefix .. p.id
      local rec = redis.call('HMGET', key, 'status', 'source')
      local mine = rec[2] == 'parked:' .. redis.sha1hex(item)
      if mine or not rec[1] then
        local resumed = resumed_of(p.lane)  -- read before its lane: no second wait behind the lane's backlog
        local eid = redis.call('XADD', lane_prefix .. resumed, '*', unpack(p.fields))
        if mine then redis.call('HSET', key, 'source', resumed .. '/' .. eid) end
        if cap > 0 then redis.call('ZADD', running, now + reserve_ms, p.id); n = n + 1 end
        moved = moved + 1
      end
    end
  end
  local left = redis.call('LLEN', parked)
  if left == 0 then
    redis.call('HDEL', tc_tenants(base), tenant)
  elseif moved > 0 or tonumber(redis.call('HGET', tc_tenants(base), tenant)) ~= left then
    -- written only when it changed: the upkeep looks at every tenant with jobs parked each second, and each write
    -- goes to the replicas and the AOF (10,000 tenants parked made 10,000 writes a second, nothing moving)
    redis.call('HSET', tc_tenants(base), tenant, left)
  end
  return moved
end
-- A capped job's run ended (info: {tenant, cap, reserve_ms}): its slot is free, and the oldest parked jobs that now fit
-- are let go (tc_unpark). keep: a hand-back, whose job goes straight back (to its resumed stream): it keeps its slot as a
-- reservation.
local function tc_release(job_prefix, lane_prefix, info, jid, keep)
  if type(info) ~= 'table' or not info[1] then return end
  local running = tc_running(tc_base(job_prefix), info[1])
  local now = tc_now()
  if keep then
    redis.call('ZADD', running, now + tonumber(info[3]), jid)
  else
    redis.call('ZREM', running, jid)
    tc_unpark(job_prefix, lane_prefix, info[1], tonumber(info[2]), now, tonumber(info[3]), tonumber(info[2]))
  end
end
