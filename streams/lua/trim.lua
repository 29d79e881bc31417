-- Trim a lane to the oldest entry any group still needs: its oldest pending entry, or the
-- first one after its last delivered ID. Acked entries go in bulk here instead of one XDEL each.
-- KEYS[1] stream. Returns how many entries were removed.
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok or #groups == 0 then return 0 end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function older(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local keep = nil
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local need
  if tonumber(info['pending']) > 0 then
    need = redis.call('XPENDING', KEYS[1], info['name'])[2]
  else
    local ms, seq = parse(info['last-delivered-id'])
    need = string.format('%d-%d', ms, seq + 1)
  end
  if keep == nil or older(need, keep) then keep = need end
end
return redis.call('XTRIM', KEYS[1], 'MINID', keep)
