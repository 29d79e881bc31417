-- Start a batch of claimed entries of one lane: decide for each whether it runs.
-- KEYS[1] lane stream, KEYS[2] the slot guard; ARGV: job_prefix, lane_name, now_ms, worker, entries as one JSON array of
--   [entry_id, job_id, agent, submitted_at, max_attempts, deadline ('' = none), explicit ('1' when the
--   request named its id), tenant, webhook, traceparent ('' = none)], all strings; an entry whose tenant is capped
--   (STREAMCREW_TENANT_MAX_RUNNING) adds [cap (this partition's share), fields to re-add it with (flat list)], and
--   ARGV[6] is then how long (ms) a run holds its slot unrenewed (tenant_cap.lua, prepended).
-- An id-less request's job id is its entry ID (in a partitioned prefix '<entry ID>:<p>'); if a record of
-- that id belongs to another entry (the same entry ID on another lane), the job is named '<lane>:<that id>'
-- instead ('<lane>:<entry ID>[:<p>]', so it still names its partition): never a false duplicate.
-- started_at is the job's first start (kept across retries and hand-backs); attempt_started_at is this attempt's.
-- Returns per entry {decision, attempts, used, job_id, started_at (the first start; '' if it never started), usage (of
--   the attempts before: a retry keeps it in the record; '' if none)} where
--   decision is run: record now running, attempts counted; dup: another entry owns this job or it ended;
--   parked: its tenant has cap jobs running: not run, no attempt counted, the entry to be acked (tenant_cap.lua);
--   exhausted: the attempt budget is spent; expired: the deadline passed before it first started (a retry of a
--   job that started in time is not expired: the deadline bounds the wait for a start).
local job_prefix, lane_name, now, worker = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local terminal = {completed = true, failed = true, rejected = true, expired = true}
local out = {}
local cap_base, clock = tc_base(job_prefix), nil
local lane_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #lane_name)
-- Whether a capped entry's job may run now: it holds a slot already (a re-run: reclaimed, handed back, un-parked),
-- or its tenant has a free one, which it takes (ZADD of the job id: a second start of it does not count twice).
local function fits(e, jid)
  if not e[11] or e[11] == '' then return true end
  local running = tc_running(cap_base, e[8])
  clock = clock or tc_now()
  if not redis.call('ZSCORE', running, jid) and tc_count(running, clock, job_prefix, lane_prefix, tonumber(ARGV[6])) >= tonumber(e[11]) then
    return false
  end
  redis.call('ZADD', running, clock + tonumber(ARGV[6]), jid)
  return true
end
-- Whether a deadline (epoch ms) has passed, by Redis' clock: a worker whose clock ran ahead expired jobs with time left.
local function past(deadline)
  clock = clock or tc_now()
  return clock > tonumber(deadline)
end
for _, e in ipairs(cjson.decode(ARGV[5])) do
  local eid, jid, agent, sub, max, deadline, explicit = e[1], e[2], e[3], e[4], tonumber(e[5]), e[6], e[7]
  local key = job_prefix .. jid
  local me = lane_name .. '/' .. eid
  local rec = redis.call('HMGET', key, 'status', 'source', 'attempts', 'base', 'started_at', 'worker', 'attempt_started_at', 'usage')
  if explicit ~= '1' and rec[2] and rec[2] ~= me then
    jid = lane_name .. ':' .. jid
    key = job_prefix .. jid
    rec = redis.call('HMGET', key, 'status', 'source', 'attempts', 'base', 'started_at', 'worker', 'attempt_started_at', 'usage')
  end
  local st, src = rec[1], rec[2]
  local att, base = tonumber(rec[3]) or 0, tonumber(rec[4]) or 0
  if st == 'running' and src == me and rec[6] == worker and rec[7] == now then
    -- this very call ran before: redis-py sent it again after its reply was lost (a timeout, a dropped
    -- connection), and a stalled Redis runs both copies. Answer as the first did; count no second attempt.
    out[#out + 1] = {'run', att, att - base, jid, rec[5] or now, rec[8] or ''}
  elseif st and (terminal[st] or (src and src ~= me)) then
    out[#out + 1] = {'dup', att, att - base, jid, '', ''}
  elseif att - base >= max then
    out[#out + 1] = {'exhausted', att, att - base, jid, rec[5] or '', rec[8] or ''}
  elseif deadline ~= '' and not rec[5] and past(deadline) then
    out[#out + 1] = {'expired', att, att - base, jid, '', ''}
  elseif not fits(e, jid) then
    local parked = tc_park(cap_base, e[8], lane_name, jid, e[12])
    if src == me then  -- queued (or retrying: a promoted retry) stays; a reclaimed run that lost its slot is queued again
      if st == 'running' then redis.call('HSET', key, 'source', parked, 'status', 'queued') else redis.call('HSET', key, 'source', parked) end
    else  -- a raw XADD: its record starts here, queued
      local w = {'status', 'queued', 'agent', agent, 'source', parked, 'submitted_at', sub, 'lane', lane_name}
      for i, name in ipairs({'tenant', 'webhook', 'traceparent'}) do
        if e[7 + i] and e[7 + i] ~= '' then w[#w + 1] = name; w[#w + 1] = e[7 + i] end
      end
      redis.call('HSET', key, unpack(w))
    end
    out[#out + 1] = {'parked', att, att - base, jid, '', ''}
  else
    att = att + 1
    local started = rec[5] or now  -- the first start is kept; one HSET writes it with the rest
    local first = rec[5] and {} or {'started_at', now}  -- not re-written (a replica is sent every field written)
    if src == me then  -- published by a producer: agent, submitted_at and lane are there already
      redis.call('HSET', key, 'status', 'running', 'attempts', att, 'attempt_started_at', now, 'worker', worker,
        unpack(first))
    else  -- a raw XADD: the record starts here, with what its readers (a tenant's API key) need to know it
      for i, name in ipairs({'tenant', 'webhook', 'traceparent'}) do
        if e[7 + i] and e[7 + i] ~= '' then first[#first + 1] = name; first[#first + 1] = e[7 + i] end
      end
      redis.call('HSET', key, 'status', 'running', 'agent', agent, 'attempts', att, 'attempt_started_at', now,
        'worker', worker, 'source', me, 'submitted_at', sub, 'lane', lane_name, unpack(first))
    end
    out[#out + 1] = {'run', att, att - base, jid, started, rec[8] or ''}
  end
end
return out
