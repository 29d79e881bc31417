-- Move due retries from the delayed set back to their lanes, atomically (any worker may run it).
-- KEYS[1] delayed, KEYS[2] the slot guard; ARGV: now_ms, limit, job_prefix, lane_prefix. Member: JSON {lane, id, fields}.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  local ok, item = pcall(cjson.decode, member)
  if ok and type(item) == 'table' and item.lane and item.fields then
    local flat = {}
    for k, v in pairs(item.fields) do
      flat[#flat + 1] = k
      flat[#flat + 1] = tostring(v)
    end
    local eid = redis.call('XADD', ARGV[4] .. item.lane, '*', unpack(flat))
    redis.call('HSET', ARGV[3] .. item.id, 'source', item.lane .. '/' .. eid)
  end
  redis.call('ZREM', KEYS[1], member)  -- after the XADD: a script error leaves the retry due, not lost
end
return #due
