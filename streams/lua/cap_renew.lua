-- Renew the slots of a worker's capped jobs still running (tenant_cap.lua, prepended), as their leases are renewed:
-- only members still there (ZADD XX): a slot its job's ending freed is not taken again.
-- KEYS[1] the slot guard; ARGV: job_prefix, hold_ms, then tenant, job id pairs.
local running_base, deadline = tc_base(ARGV[1]), tc_now() + tonumber(ARGV[2])
for i = 3, #ARGV, 2 do
  redis.call('ZADD', tc_running(running_base, ARGV[i]), 'XX', deadline, ARGV[i + 1])
end
return (#ARGV - 2) / 2
