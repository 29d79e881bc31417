-- Publish a batch of requests to one lane, idempotent on the job id, and on the call itself.
-- KEYS[1] lane stream, KEYS[2] the prefix's ID clock, KEYS[3] this call's receipt, KEYS[4] the slot guard (see below);
-- ARGV: job_prefix, lane_name, jobs as one JSON
-- array (all strings) of
--   [job_id ('' = use the entry ID), agent, submitted_at ('' = the entry ID's time), [field, value, ...],
--    [record field, value, ...] (tenant, webhook, traceparent: known to status readers from the start)]
-- Entry IDs come from one clock shared by the three lanes, so an id-less job's id (its entry ID)
-- is unique across lanes, not only within one. An id-less job never adopts an existing record: when
-- a record of its entry ID exists (written by a raw XADD naming that id), the job is named
-- '<lane>:<entry ID>' as start.lua names it; when that exists too, the entry is withdrawn and the job
-- answered 'conflict' (created 0, id ''): producers refuse explicit ids of both shapes, so only raw
-- XADDs can get there.
-- ARGV[4] is appended to an id-less job's entry ID to make its id (':<p>' names a partition); ARGV[5] the receipt's
-- lifetime in ms.
-- The receipt (a key named by a token the producer draws per call) keeps this call's reply: redis-py sends a call
-- again when its reply timed out or its connection dropped, and a Redis that was only stalled runs both copies.
-- The copy answers from the receipt, so an id-less request makes one job, not one the caller never hears of.
-- Returns per job {job_id, status, created (1|0), tenant, lane}: for an id already taken, the status, tenant ('' for
-- none) and lane ('' for none) of the record it names, read together, so a caller bound to a tenant can tell whose status it is even when
-- that record is gone by the time it could read it; '' for a job created here (its tenant is the request's).
-- The slot guard (Keys.slot_guard) is a key never written: declaring it makes Redis answer TRYAGAIN while the
-- partition's slot migrates, since the job records and lanes this script names itself are not declared.
local lane, clock, receipt = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, lane_name, id_suffix = ARGV[1], ARGV[2], ARGV[4]
local kept = redis.call('GET', receipt)
if kept then return cjson.decode(kept) end

-- One GET and one SET of the clock per call, one TIME: each replicated write costs the master CPU per job.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = redis.call('GET', clock)
local ms, seq = now, -1
if last then
  local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
  lms, lseq = tonumber(lms), tonumber(lseq)
  if lms >= now then ms, seq = lms, lseq end
end
local issued = false
local function next_id()
  seq = seq + 1
  issued = string.format('%d-%d', ms, seq)
  return issued
end

local out = {}
for _, job in ipairs(cjson.decode(ARGV[3])) do
  local jid, agent, sub, fields, extra = job[1], job[2], job[3], job[4], job[5]
  local st, tenant, at = false, false, false
  if jid ~= '' then
    local rec = redis.call('HMGET', job_prefix .. jid, 'status', 'tenant', 'lane')
    st, tenant, at = rec[1], rec[2], rec[3]
  end
  if st then
    out[#out + 1] = {jid, st, 0, tenant or '', at or ''}
  else
    local eid = redis.pcall('XADD', lane, next_id(), unpack(fields))
    if type(eid) == 'table' and eid.err then  -- the lane is ahead of the clock (a plain XADD *): fall back
      eid = redis.call('XADD', lane, '*', unpack(fields))
    end
    if jid == '' then
      jid = eid .. id_suffix
      if redis.call('EXISTS', job_prefix .. jid) == 1 then
        jid = lane_name .. ':' .. eid .. id_suffix
        if redis.call('EXISTS', job_prefix .. jid) == 1 then
          redis.call('XDEL', lane, eid)
          jid = false
        end
      end
    end
    if jid then
      if sub == '' then sub = string.match(eid, '^(%d+)') end
      -- one HSET with the request's own fields (a replica is sent each write: one command, not two)
      redis.call('HSET', job_prefix .. jid, 'status', 'queued', 'agent', agent, 'attempts', 0,
        'submitted_at', sub, 'source', lane_name .. '/' .. eid, 'lane', lane_name, unpack(extra))
      out[#out + 1] = {jid, 'queued', 1, '', lane_name}
    else
      out[#out + 1] = {'', 'conflict', 0, '', ''}
    end
  end
end
if issued then redis.call('SET', clock, issued) end
if #out > 0 then redis.call('SET', receipt, cjson.encode(out), 'PX', ARGV[5]) end
return out
