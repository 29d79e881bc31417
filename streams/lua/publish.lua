-- Publish a batch of requests to one lane, idempotent on the job id.
-- KEYS[1] lane stream; ARGV: job_prefix, lane_name, now_ms, group, then per job:
--   job_id ('' = use the entry ID), agent, submitted_at, nfields, field, value, ...
-- Returns per job {job_id, status, created (1|0)}.
local lane = KEYS[1]
local job_prefix, lane_name, now = ARGV[1], ARGV[2], ARGV[3]
local out = {}
local i = 5
while i <= #ARGV do
  local jid, agent, sub, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local fields = {}
  for j = 1, 2 * n do fields[j] = ARGV[i + 3 + j] end
  i = i + 4 + 2 * n
  local existing = false
  if jid ~= '' then
    local st = redis.call('HGET', job_prefix .. jid, 'status')
    if st then
      out[#out + 1] = {jid, st, 0}
      existing = true
    end
  end
  if not existing then
    local eid = redis.call('XADD', lane, '*', unpack(fields))
    if jid == '' then jid = eid end
    if sub == '' then sub = string.match(eid, '^(%d+)') end
    redis.call('HSET', job_prefix .. jid, 'status', 'queued', 'agent', agent, 'attempts', 0,
      'submitted_at', sub, 'source', lane_name .. '/' .. eid, 'lane', lane_name)
    out[#out + 1] = {jid, 'queued', 1}
  end
end
return out
