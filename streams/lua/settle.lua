-- Settle a batch of entries atomically: the one place results, records, acks and dead letters are written.
-- KEYS: results, dead, delayed; ARGV: job_prefix, group, results_maxlen, job_ttl_s, lane_prefix, then ops:
--   done      lane eid src jid nres [k v]* ndead [k v]*   terminal result (fenced), optional dead letter
--   retry     lane eid src jid due member error           back to the delayed set (fenced)
--   handback  lane eid src jid nf [k v]*                  re-add to the lane at once, attempt not counted (fenced)
--   drop      lane eid                                    ack and delete only (duplicates)
-- The fence: an op on a job whose record is terminal, or now owned by another entry, only acks.
-- Returns per op 1 when it wrote, 0 when it only acked.
local results, dead, delayed = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, group, maxlen, ttl, lane_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local terminal = {completed = true, failed = true, rejected = true, expired = true}
local out = {}
local i = 6
local function fenced(jid, src)
  local rec = redis.call('HMGET', job_prefix .. jid, 'status', 'source')
  if rec[1] and terminal[rec[1]] then return true end
  if rec[2] and rec[2] ~= src then return true end
  return false
end
local function ack(lane, eid)
  redis.call('XACK', lane, group, eid)
  redis.call('XDEL', lane, eid)
end
while i <= #ARGV do
  local op, lane, eid = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if op == 'drop' then
    ack(lane, eid)
    out[#out + 1] = 0
    i = i + 3
  elseif op == 'done' then
    local src, jid, nres = ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5])
    local res = {}
    for j = 1, 2 * nres do res[j] = ARGV[i + 5 + j] end
    i = i + 6 + 2 * nres
    local ndead = tonumber(ARGV[i])
    local dl = {}
    for j = 1, 2 * ndead do dl[j] = ARGV[i + j] end
    i = i + 1 + 2 * ndead
    if fenced(jid, src) then
      out[#out + 1] = 0
    else
      redis.call('XADD', results, 'MAXLEN', '~', maxlen, '*', unpack(res))
      local key = job_prefix .. jid
      redis.call('HDEL', key, 'error', 'result', 'usage')
      redis.call('HSET', key, unpack(res))
      redis.call('EXPIRE', key, ttl)
      if ndead > 0 then redis.call('XADD', dead, '*', unpack(dl)) end
      out[#out + 1] = 1
    end
    ack(lane, eid)
  elseif op == 'retry' then
    local src, jid, due, member, err = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
    i = i + 8
    if fenced(jid, src) then
      out[#out + 1] = 0
    else
      redis.call('ZADD', delayed, due, member)
      redis.call('HSET', job_prefix .. jid, 'status', 'retrying', 'error', err, 'source', 'delayed')
      out[#out + 1] = 1
    end
    ack(lane, eid)
  elseif op == 'handback' then
    local src, jid, nf = ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 5])
    local fields = {}
    for j = 1, 2 * nf do fields[j] = ARGV[i + 5 + j] end
    i = i + 6 + 2 * nf
    if fenced(jid, src) then
      out[#out + 1] = 0
    else
      local new = redis.call('XADD', lane, '*', unpack(fields))
      local key = job_prefix .. jid
      local att = tonumber(redis.call('HGET', key, 'attempts')) or 1
      redis.call('HSET', key, 'status', 'queued', 'attempts', math.max(att - 1, 0),
        'source', string.sub(lane, #lane_prefix + 1) .. '/' .. new)
      out[#out + 1] = 1
    end
    ack(lane, eid)
  else
    return redis.error_reply('settle: unknown op ' .. tostring(op))
  end
end
return out
