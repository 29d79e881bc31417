-- Renew the leases of a consumer's in-flight entries: reset their idle time, but only
-- for entries it still owns (a reclaimed entry is not stolen back).
-- KEYS[1] stream; ARGV: group, consumer, entry_id... Returns the IDs no longer owned.
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
