-- The lease on one partition's upkeep (streams.upkeep): its holder does the upkeep, the other workers only ask for
-- it, once a second, so idle workers cost the partition's master one call a second each, not ten.
-- KEYS[1] the lease; ARGV: worker, lease ms (0: let it go, if held). Returns 1 when the caller holds it now (taken or
-- renewed), else 0.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  if ARGV[2] == '0' then
    redis.call('DEL', KEYS[1])
    return 0
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder or ARGV[2] == '0' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
