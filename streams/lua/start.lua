-- Start a batch of claimed entries of one lane: decide for each whether it runs.
-- KEYS[1] lane stream; ARGV: job_prefix, lane_name, now_ms, worker, then per entry:
--   entry_id, job_id, agent, submitted_at, max_attempts, deadline ('' = none)
-- Returns per entry {decision, attempts, used} where decision is
--   run: record now running, attempts counted; dup: another entry owns this job or it ended;
--   exhausted: the attempt budget is spent; expired: the deadline passed before it started.
local job_prefix, lane_name, now, worker = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local terminal = {completed = true, failed = true, rejected = true, expired = true}
local out = {}
local i = 5
while i <= #ARGV do
  local eid, jid, agent, sub, max, deadline = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), ARGV[i + 5]
  i = i + 6
  local key = job_prefix .. jid
  local me = lane_name .. '/' .. eid
  local rec = redis.call('HMGET', key, 'status', 'source', 'attempts', 'base')
  local st, src = rec[1], rec[2]
  local att, base = tonumber(rec[3]) or 0, tonumber(rec[4]) or 0
  if st and (terminal[st] or (src and src ~= me)) then
    out[#out + 1] = {'dup', att, att - base}
  elseif att - base >= max then
    out[#out + 1] = {'exhausted', att, att - base}
  elseif deadline ~= '' and now > tonumber(deadline) then
    out[#out + 1] = {'expired', att, att - base}
  else
    att = att + 1
    redis.call('HSET', key, 'status', 'running', 'agent', agent, 'attempts', att, 'started_at', now,
      'worker', worker, 'source', me, 'submitted_at', sub, 'lane', lane_name)
    out[#out + 1] = {'run', att, att - base}
  end
end
return out
