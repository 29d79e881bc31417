-- Let go of a draining consumer's entries whose work stopped unsettled: each it still owns is marked idle past the
-- lease (XCLAIM ... IDLE JUSTID), so another consumer's next sweep takes it; one another consumer took over is left alone.
-- KEYS[1] stream; ARGV: group, consumer, idle_ms, entry_id... Returns the IDs let go.
local out = {}
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
    out[#out + 1] = ARGV[i]
  end
end
return out
