-- Dead letters written once each, whatever repeats the call (redis-py's copy after a lost reply, a retry after an
-- outage, a redelivery or reclaim), each acking the entry it settles in the same call: no crash falls between.
-- KEYS[1] dead stream, KEYS[2] the stream whose entries are acked in group ARGV[2] (unused when ARGV[2] is ''),
-- then one guard key (Keys.once) per letter; all of one slot.
-- ARGV: guard ms, group, then per letter: the entry ID it settles ('' none), nf, (k v)*.
-- Returns per letter 1 when written, 0 when its guard says it was.
local group, out, i = ARGV[2], {}, 3
for n = 3, #KEYS do
  local settles, nf = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('EXISTS', KEYS[n]) == 1 then
    out[#out + 1] = 0
  else
    local eid = redis.call('XADD', KEYS[1], '*', unpack(ARGV, i + 2, i + 1 + 2 * nf))
    redis.call('SET', KEYS[n], eid, 'PX', ARGV[1])
    out[#out + 1] = 1
  end
  if group ~= '' and settles ~= '' then redis.call('XACK', KEYS[2], group, settles) end
  i = i + 2 + 2 * nf
end
return out
