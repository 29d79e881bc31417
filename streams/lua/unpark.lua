-- Upkeep of a partition's parked jobs (tenant_cap.lua, prepended): for every tenant with jobs parked, drop its stale
-- running members and let go the parked jobs that now fit (to their lanes' resumed streams). It is what frees a tenant
-- whose running jobs' worker died (their members expire; no settle comes to un-park), and what lets parked jobs go once
-- a cap is raised or removed.
-- KEYS[1] the slot guard; ARGV: job_prefix, lane_prefix, reserve_ms, limit (moves per tenant), default cap ('0' none),
-- JSON {tenant: cap} (this partition's shares). Returns how many jobs moved.
local job_prefix, lane_prefix, reserve_ms, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local default, caps = tonumber(ARGV[5]), cjson.decode(ARGV[6])
local tenants = redis.call('HKEYS', tc_tenants(tc_base(job_prefix)))
if #tenants == 0 then return 0 end
local now, moved = tc_now(), 0
for _, tenant in ipairs(tenants) do
  local cap = tonumber(caps[tenant] or default)
  moved = moved + tc_unpark(job_prefix, lane_prefix, tenant, cap, now, reserve_ms, cap > 0 and cap or limit)
end
return moved
