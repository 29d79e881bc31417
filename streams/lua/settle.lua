-- Settle a batch of entries atomically: the one place results, records, acks and dead letters are written.
-- KEYS: results, dead, delayed, the slot guard; ARGV: job_prefix, group, results_maxlen (unused), job_ttl_s, lane_prefix, ops
-- where ops is one JSON array (all values strings) of:
--   ["done", lane, eid, src, jid, [k, v, ...], [dead k, v, ...], alt, parent, step]  terminal result (fenced),
--        optional dead letter; alt (id-less requests): the job id to use when jid's record belongs to another entry;
--        parent, step (workflow steps): the fan-in runs in the same call (workflow.lua, prepended)
--   ["retry", lane, eid, src, jid, due, member, error]              back to the delayed set (fenced)
--   ["handback", lane, eid, src, jid, [k, v, ...]]                  re-add to the lane at once, attempt not counted (fenced)
--   ["drop", lane, eid]                                             ack only (duplicates)
-- The fence: an op on a job whose record is terminal, or now owned by another entry, only acks.
-- Acked entries leave the lane with the periodic trim (trim.lua), not one XDEL each.
-- Returns per op 1 when it wrote, 0 when it only acked, {1, status, duration_ms} when a step ended its workflow.
local results, dead, delayed = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, group, maxlen, ttl, lane_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local terminal = {completed = true, failed = true, rejected = true, expired = true}
local out = {}
local acks = {}  -- lane -> entry ids, acked together at the end (the script is atomic either way)
local C = wf_context(job_prefix, lane_prefix, results, dead, maxlen, ttl)
-- Returns whether the op is fenced, and whether the record holds an earlier attempt's error.
local function fenced(jid, src)
  local rec = redis.call('HMGET', job_prefix .. jid, 'status', 'source', 'error')
  if rec[1] and terminal[rec[1]] then return true end
  if rec[2] and rec[2] ~= src then return true end
  return false, rec[3]
end
for _, op in ipairs(cjson.decode(ARGV[6])) do
  local kind, lane, eid = op[1], op[2], op[3]
  if kind == 'drop' then
    out[#out + 1] = 0
  elseif kind == 'done' then
    local jid, res, dl = op[5], op[6], op[7]
    if op[8] and op[8] ~= '' then
      local owner = redis.call('HGET', job_prefix .. jid, 'source')
      if owner and owner ~= op[4] then
        jid = op[8]
        for i = 1, #res, 2 do if res[i] == 'id' then res[i + 1] = jid end end
        for i = 1, #dl, 2 do if dl[i] == 'id' then dl[i + 1] = jid end end
      end
    end
    local stop, stale_error = fenced(jid, op[4])
    if stop then
      out[#out + 1] = 0
    else
      redis.call('XADD', results, '*', unpack(res))  -- no MAXLEN: trim_results.lua keeps what groups need
      local key = job_prefix .. jid
      if stale_error then redis.call('HDEL', key, 'error') end
      redis.call('HSET', key, 'source', op[4], unpack(res))
      redis.call('EXPIRE', key, ttl)
      local dead_id = false
      if #dl > 0 then dead_id = redis.call('XADD', dead, '*', unpack(dl)) end
      out[#out + 1] = 1
      if op[9] and op[9] ~= '' then out[#out] = wf_step_settled(C, jid, op[9], op[10], res, dead_id) end
    end
  elseif kind == 'retry' then
    local jid = op[5]
    if fenced(jid, op[4]) then
      out[#out + 1] = 0
    else
      redis.call('ZADD', delayed, op[6], op[7])
      redis.call('HSET', job_prefix .. jid, 'status', 'retrying', 'error', op[8], 'source', 'delayed')
      out[#out + 1] = 1
    end
  elseif kind == 'handback' then
    local jid = op[5]
    if fenced(jid, op[4]) then
      out[#out + 1] = 0
    else
      local new = redis.call('XADD', lane, '*', unpack(op[6]))
      local key = job_prefix .. jid
      local att = tonumber(redis.call('HGET', key, 'attempts')) or 1
      redis.call('HSET', key, 'status', 'queued', 'attempts', math.max(att - 1, 0),
        'source', string.sub(lane, #lane_prefix + 1) .. '/' .. new)
      out[#out + 1] = 1
    end
  else
    return redis.error_reply('settle: unknown op ' .. tostring(kind))
  end
  local ids = acks[lane]
  if not ids then ids = {}; acks[lane] = ids end
  ids[#ids + 1] = eid
end
for lane, ids in pairs(acks) do redis.call('XACK', lane, group, unpack(ids)) end  -- one XACK per lane, not per entry
return out
