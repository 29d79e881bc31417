-- Trim a lane to the oldest entry any group still needs: its oldest pending entry, or the
-- first one after its last delivered ID. Acked entries go in bulk here instead of one XDEL each.
-- (groups.lua in front: it also repairs read counters a promoted replica left behind.)
-- KEYS[1] stream. Returns how many entries were removed.
local keep = oldest_needed(KEYS[1], stream_groups(KEYS[1]))
if keep == nil then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', keep)
