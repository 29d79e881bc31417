-- Trim lanes to the oldest entry any group still needs: its oldest pending entry, or the
-- first one after its last delivered ID. Acked entries go in bulk here instead of one XDEL each.
-- (groups.lua in front: it also repairs read counters a promoted replica left behind.)
-- Past that floor, acknowledged entries older than ARGV[2] ms are deleted, ARGV[1] at most a stream per call: the
-- floor is a pending entry, and one run of hours (a crew, a hung call renewed by its live worker) held every entry
-- after it, the lane growing by the whole traffic of those hours. Shorter pins wait for the bulk trim.
-- KEYS: the streams, one slot (a partition's lanes and resumed streams: one call a second, not one per stream).
-- Returns {entries removed from them all, 1 when a stream had more to delete than this call's share}.
local budget, after_ms = tonumber(ARGV[1]) or 0, tonumber(ARGV[2]) or 0
-- Acknowledged entries of `key` from `floor` on that every group has been given and none holds pending, up to the
-- ID of `after_ms` ago: deleted, up to `budget` of them read; returns how many, and whether the read was full.
local function sweep_acked(key, groups, floor)
  local need, upto = 0, nil
  for _, g in ipairs(groups) do
    local lag = tonumber(g['lag'])
    if lag == nil then return 0, false end  -- Redis 6.2, or a lag Redis cannot tell: what a group still needs is unknown
    need = need + tonumber(g['pending']) + lag
    if upto == nil or id_older(g['last-delivered-id'], upto) then upto = g['last-delivered-id'] end
  end
  if upto == nil or redis.call('XLEN', key) - need <= 0 then return 0, false end  -- nothing acknowledged past the floor
  local aged = tostring(now_ms() - after_ms) .. '-0'
  if id_older(aged, upto) then upto = aged end
  -- what is pending in the range takes no share: read past as many entries as the groups hold (up to nine shares more;
  -- XRANGE reads each entry whole, a request of up to STREAMCREW_MAX_REQUEST_BYTES: a call reads ten shares at most)
  local pending = 0
  for _, g in ipairs(groups) do pending = pending + tonumber(g['pending']) end
  local count = budget + math.min(pending, 9 * budget)
  local entries = redis.call('XRANGE', key, floor, upto, 'COUNT', count)
  if #entries == 0 then return 0, false end
  local first, last = entries[1][1], entries[#entries][1]
  local held = {}
  for _, g in ipairs(groups) do  -- every pending ID in the range read (deleted entries' too: the count covers them)
    -- and each group's last delivered entry: deleted, it is a tombstone at the group's position, and Redis can no
    -- longer tell the group's lag (XINFO GROUPS answers nil: KEDA's trigger, the gauges and stats lose it)
    held[g['last-delivered-id']] = true
    for _, p in ipairs(redis.call('XPENDING', key, g['name'], first, last, #entries + tonumber(g['pending']))) do held[p[1]] = true end
  end
  local gone = {}
  for _, e in ipairs(entries) do
    if not held[e[1]] then gone[#gone + 1] = e[1] end
  end
  local deleted = 0
  for i = 1, #gone, 1000 do
    deleted = deleted + redis.call('XDEL', key, unpack(gone, i, math.min(i + 999, #gone)))
  end
  return deleted, #entries == count and deleted > 0
end
local removed, more = 0, 0
for _, key in ipairs(KEYS) do
  local groups = stream_groups(key)
  local keep = oldest_needed(key, groups)
  if keep ~= nil then
    removed = removed + redis.call('XTRIM', key, 'MINID', keep)
    if budget > 0 then
      local deleted, full = sweep_acked(key, groups, keep)
      removed = removed + deleted
      if full then more = 1 end
    end
  end
end
return {removed, more}
