-- Trim the results stream: entries every group has acknowledged go once the stream holds more than
-- `keep`; entries a group still needs go only past the hard cap, and are counted.
-- (groups.lua in front.) KEYS[1] results; ARGV: keep, hard_cap, batch (most acknowledged entries one call removes).
-- Returns {acknowledged entries removed, entries removed that a group had not acknowledged}.
local results = KEYS[1]
local keep, hard, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local groups = stream_groups(results)  -- first, whatever the length: it repairs read counters (groups.lua)
local len = redis.call('XLEN', results)
if len <= keep then return {0, 0} end
-- The oldest entry any group still needs (as trim.lua finds it for the lanes); nil when none does.
local floor = oldest_needed(results, groups)
if floor == nil then return {redis.call('XTRIM', results, 'MAXLEN', keep), 0} end  -- no group needs any
local acked = 0
local head = redis.call('XRANGE', results, '-', '+', 'COUNT', 1)
if #head > 0 and id_older(head[1][1], floor) then  -- some acknowledged entries to spare
  if len > hard then  -- all acknowledged ones at once: room before any unacknowledged one is cut (finding the
    -- `keep`-th newest would read up to `keep` entries, a million by default, in one call)
    acked = redis.call('XTRIM', results, 'MINID', floor)
  else
    local span = redis.call('XRANGE', results, '-', '+', 'COUNT', math.min(len - keep, batch))
    local last = span[#span][1]
    if id_older(last, floor) then
      acked = redis.call('XTRIM', results, 'MINID', id_after(last))
    else
      acked = redis.call('XTRIM', results, 'MINID', floor)
    end
  end
  len = len - acked
end
local dropped = 0
if len > hard then dropped = redis.call('XTRIM', results, 'MAXLEN', hard) end
return {acked, dropped}
