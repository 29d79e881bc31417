-- Move due retries from the delayed set back to their lanes, atomically (any worker may run it).
-- KEYS[1] delayed, KEYS[2] the slot guard; ARGV: limit, job_prefix, lane_prefix. Member: JSON {lane, id, fields}.
-- Due by Redis' clock, which settle.lua dates retries by: a worker's clock ahead sent retries back at once (attempts
-- spent within a second, a 429's wait ignored), one behind held every retry of the partition back by as much.
-- A retry moves only while its job's record is still its own: retrying, with the source settle.lua wrote for this very
-- member ('delayed:' and its SHA1; plain 'delayed' from a worker before that mark). Any other record is a newer run's
-- of the same id (a workflow's state expired while its step's retry waited, and the workflow ran again): the retry is
-- dropped, neither re-added to the lane nor written over that record. A job with no record left is re-added
-- without writing one: start.lua makes it from the entry, as for a raw XADD.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local job_prefix, lane_prefix = ARGV[2], ARGV[3]
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, member in ipairs(due) do
  local ok, item = pcall(cjson.decode, member)
  if ok and type(item) == 'table' and item.lane and item.fields then
    local key = job_prefix .. item.id
    local rec = redis.call('HMGET', key, 'status', 'source')
    local mine = rec[1] == 'retrying' and (rec[2] == 'delayed:' .. redis.sha1hex(member) or rec[2] == 'delayed')
    if mine or not rec[1] then
      local flat = {}
      for k, v in pairs(item.fields) do
        flat[#flat + 1] = k
        flat[#flat + 1] = tostring(v)
      end
      local eid = redis.call('XADD', lane_prefix .. item.lane, '*', unpack(flat))
      if mine then redis.call('HSET', key, 'source', item.lane .. '/' .. eid) end
    end
  end
  redis.call('ZREM', KEYS[1], member)  -- after the XADD: a script error leaves the retry due, not lost
end
return #due
