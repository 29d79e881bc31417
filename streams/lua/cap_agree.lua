-- Workers tell each other their STREAMCREW_TENANT_MAX_RUNNING (streams.tenant_cap: TenantCapper.agree): each writes its
-- own under its name with Redis' time and hears back the live workers whose value differs; entries not renewed for
-- forget_ms are dropped.
-- KEYS[1] the hash <partition 0's prefix>:tenant-caps (worker -> '<ms>|<value>'); ARGV: worker, value, live_ms, forget_ms.
-- Returns worker, value pairs (flat) of the workers heard from within live_ms whose value is not this one's.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live, forget = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], now .. '|' .. ARGV[2])
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ms, value = string.match(all[i + 1], '^(%d+)|(.*)$')
  local age = now - (tonumber(ms) or 0)
  if age > forget then
    redis.call('HDEL', KEYS[1], all[i])
  elseif age <= live and all[i] ~= ARGV[1] and value ~= ARGV[2] then
    out[#out + 1] = all[i]
    out[#out + 1] = value
  end
end
redis.call('PEXPIRE', KEYS[1], forget)
return out
