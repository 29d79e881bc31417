-- Trim lanes to the oldest entry any group still needs: its oldest pending entry, or the
-- first one after its last delivered ID. Acked entries go in bulk here instead of one XDEL each.
-- (groups.lua in front: it also repairs read counters a promoted replica left behind.)
-- KEYS: the streams, one slot (a partition's lanes and resumed streams: one call a second, not one per stream).
-- Returns how many entries were removed from them all.
local removed = 0
for _, key in ipairs(KEYS) do
  local keep = oldest_needed(key, stream_groups(key))
  if keep ~= nil then removed = removed + redis.call('XTRIM', key, 'MINID', keep) end
end
return removed
