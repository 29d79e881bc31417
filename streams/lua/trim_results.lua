-- Trim the results stream: entries every group has acknowledged go once the stream holds more than
-- `keep`; entries a group still needs go only past the hard cap, and are counted.
-- KEYS[1] results; ARGV: keep, hard_cap, batch (most acknowledged entries one call removes).
-- Returns {acknowledged entries removed, entries removed that a group had not acknowledged}.
local results = KEYS[1]
local keep, hard, batch = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local len = redis.call('XLEN', results)
if len <= keep then return {0, 0} end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function older(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  return am < bm or (am == bm and as < bs)
end
local function after(id)
  local ms, seq = parse(id)
  return string.format('%d-%d', ms, seq + 1)
end
-- The oldest entry any group still needs (as trim.lua finds it for the lanes); nil when none does.
local floor = nil
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', results)
if ok then
  for _, g in ipairs(groups) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    local need
    if tonumber(info['pending']) > 0 then
      need = redis.call('XPENDING', results, info['name'])[2]
    else
      need = after(info['last-delivered-id'])
    end
    if floor == nil or older(need, floor) then floor = need end
  end
end
if floor == nil then return {redis.call('XTRIM', results, 'MAXLEN', keep), 0} end  -- no group needs any
local acked = 0
local head = redis.call('XRANGE', results, '-', '+', 'COUNT', 1)
if #head > 0 and older(head[1][1], floor) then  -- some acknowledged entries to spare
  if len > hard then
    acked = redis.call('XTRIM', results, 'MINID', floor)
  else
    local span = redis.call('XRANGE', results, '-', '+', 'COUNT', math.min(len - keep, batch))
    local last = span[#span][1]
    if older(last, floor) then
      acked = redis.call('XTRIM', results, 'MINID', after(last))
    else
      acked = redis.call('XTRIM', results, 'MINID', floor)
    end
  end
  len = len - acked
end
local dropped = 0
if len > hard then dropped = redis.call('XTRIM', results, 'MAXLEN', hard) end
return {acked, dropped}
