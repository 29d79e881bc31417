-- Shared by trim.lua, trim_results.lua and tenant_cap.lua: stream IDs, and what a stream's consumer groups still need.
-- An ID's two parts are unsigned 64-bit numbers (a raw XADD may name '1-9007199254740993'); Lua's numbers are doubles,
-- exact only to 2^53, so the parts stay decimal strings: compared by length, then digit by digit.
local ID_PART_MAX = '18446744073709551615'  -- 2^64 - 1
-- A flat name, value, ... reply (XINFO's) as a table.
local function as_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function parse_id(id)
  local ms, seq = string.match(id, '^0*(%d-)-0*(%d-)$')
  if ms == '' then ms = '0' end
  if seq == '' then seq = '0' end
  return ms, seq
end
-- Redis' clock in epoch ms: what every process's timing in a script goes by (processes' own clocks may differ).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function part_less(a, b)
  return #a < #b or (#a == #b and a < b)
end
local function id_older(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return part_less(am, bm) or (am == bm and part_less(as, bs))
end
local function part_next(n)
  local i = #n
  while i > 0 and string.sub(n, i, i) == '9' do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #n) end
  return string.sub(n, 1, i - 1) .. string.char(string.byte(n, i) + 1) .. string.rep('0', #n - i)
end
-- The ID right after `id`; nil after the last ID there can be.
local function id_after(id)
  local ms, seq = parse_id(id)
  if seq ~= ID_PART_MAX then return ms .. '-' .. part_next(seq) end
  if ms ~= ID_PART_MAX then return part_next(ms) .. '-0' end
  return nil
end
-- Redis before 7.2.4 does not send replicas a group's read counter (entries-read) as XREADGROUP moves it
-- (redis/redis#12898): a promoted replica then reports a lag that never drains, which KEDA's lag triggers,
-- `stats` and the lag alerts read as a backlog. A group whose last delivered ID is the stream's last generated
-- ID has read every entry ever added, so its counter is set to that (same ID: nothing is delivered again).
local function repair_read_counters(key, groups)
  local stream = as_table(redis.call('XINFO', 'STREAM', key))
  local last, added = stream['last-generated-id'], tonumber(stream['entries-added'])
  if not added then return end
  for _, g in ipairs(groups) do
    if (tonumber(g['lag']) or 0) > 0 and g['last-delivered-id'] == last then
      redis.call('XGROUP', 'SETID', key, g['name'], last, 'ENTRIESREAD', added)
    end
  end
end
-- The groups of `key` (XINFO GROUPS, one table each), their read counters repaired where a replica left them
-- behind (above); {} when the key holds no stream.
local function stream_groups(key)
  local ok, reply = pcall(redis.call, 'XINFO', 'GROUPS', key)
  if not ok then return {} end
  local groups, behind = {}, false
  for _, g in ipairs(reply) do
    local info = as_table(g)
    groups[#groups + 1] = info
    if (tonumber(info['lag']) or 0) > 0 then behind = true end
  end
  if behind then repair_read_counters(key, groups) end
  return groups
end
-- The oldest entry of `key` any group still needs: its oldest pending entry still in the stream, or the first after
-- its last delivered ID; nil when no group does. A pending entry deleted meanwhile (the results' hard cap cut it, a
-- user's XDEL or XTRIM) is needed no more: counted, it held the trim at a deleted ID for good, and the stream then
-- sat at its hard cap, every later event cut counted as dropped.
local function oldest_needed(key, groups)
  local floor, first = nil, nil
  for _, info in ipairs(groups) do
    local need
    if tonumber(info['pending']) > 0 then
      need = redis.call('XPENDING', key, info['name'])[2]
      if first == nil then
        local head = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)
        first = head[1] and head[1][1] or false  -- false: the stream is empty
      end
      if not first or id_older(need, first) then
        local kept = first and redis.call('XPENDING', key, info['name'], first, '+', 1) or {}
        need = kept[1] and kept[1][1] or id_after(info['last-delivered-id'])
      end
    else
      need = id_after(info['last-delivered-id'])  -- nil: it has read the last ID there can be, it needs none
    end
    if need and (floor == nil or id_older(need, floor)) then floor = need end
  end
  return floor
end
