-- Remove consumers idle past a threshold that hold no pending entries (restarted pods
-- leave their names behind). Atomic, so a consumer that just claimed an entry is kept.
-- KEYS[1] stream; ARGV: group, min_idle_ms. Returns the names removed.
local removed = {}
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return removed end
for _, c in ipairs(consumers) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if tonumber(info['pending']) == 0 and tonumber(info['idle']) >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
  end
end
return removed
