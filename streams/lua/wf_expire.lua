-- End workflows whose timeout_s passed while steps still ran: one 'expired' result event each (workflow.lua
-- is prepended; any worker may run it, the workflow's status fences a second run).
-- KEYS: timeouts, results, dead of one partition, the slot guard; ARGV: job_prefix, lane_prefix (that partition's), max_result_bytes, ttl,
-- limit, worker. Workflow and job keys come from those prefixes: KEYS[1]'s hash tag, one slot.
-- Due is by Redis' clock, as wf_start.lua set it: a worker's clock running ahead would end workflows early.
-- Returns {more, ended}: more is 1 when it stopped with due workflows left (its share of work done: WF_CALL_WORK, or
-- limit of them), ended per expired workflow {id, status, duration_ms}.
local C = wf_context(ARGV[1], ARGV[2], KEYS[2], KEYS[3], ARGV[3], ARGV[4])
local out = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', wf_now(), 'LIMIT', 0, tonumber(ARGV[5]) + 1)
for i, wid in ipairs(due) do
  if i > tonumber(ARGV[5]) or wf_call_full(C) then return {1, out} end
  redis.call('ZREM', KEYS[1], wid)
  local h = C.wf_prefix .. wid
  local m = redis.call('HMGET', h, 'status', 'timeout_s')
  if m[1] == 'running' then
    local r = wf_end(C, h, wid, 'expired', 'workflow timed out after ' .. m[2] .. 's', ARGV[6])
    out[#out + 1] = {wid, r[2], r[3]}
  end
end
return {0, out}
