-- Replay one dead letter: the job goes back to its lane with a fresh attempt budget.
-- KEYS[1] dead stream, KEYS[2] this call's receipt, KEYS[3] the slot guard;
-- ARGV: entry_id, job_prefix, lane_prefix, job_id, lane_name, the receipt's ms, the dead entry's source
-- ('<lane>/<entry ID>'), nf, [k v]*
-- Returns the new entry ID, false when the dead letter is gone, {'live', status} when the job of that
-- id is live again (queued, running, retrying: submitted anew since): a replay must not take it over, or
-- {'reused', status} when its record is another run's (the id submitted anew since, by anyone, and ended): a
-- replay must not overwrite it, nor carry its tenant to this letter's job.
-- A copy of the call (redis-py sends one after a lost reply; a stalled Redis runs both) answers the first's
-- entry ID from the receipt, not false for the letter the first removed.
local kept = redis.call('GET', KEYS[2])
if kept then return kept end
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
local rec = redis.call('HMGET', ARGV[2] .. ARGV[4], 'status', 'source')
local live = rec[1]
if live == 'queued' or live == 'running' or live == 'retrying' then return {'live', live} end
if rec[2] and rec[2] ~= ARGV[7] then return {'reused', live or ''} end
local nf = tonumber(ARGV[8])
local fields = {}
local owner = {}  -- who may read the record from the start (an expired record is made afresh here)
for j = 1, 2 * nf do
  fields[j] = ARGV[8 + j]
  if j % 2 == 0 and (fields[j - 1] == 'tenant' or fields[j - 1] == 'traceparent') then
    owner[#owner + 1], owner[#owner + 2] = fields[j - 1], fields[j]
  end
end
local eid = redis.call('XADD', ARGV[3] .. ARGV[5], '*', unpack(fields))
local key = ARGV[2] .. ARGV[4]
local att = tonumber(redis.call('HGET', key, 'attempts')) or 0
redis.call('HDEL', key, 'result', 'error', 'usage', 'finished_at')
redis.call('HSET', key, 'status', 'queued', 'base', att, 'attempts', att, 'source', ARGV[5] .. '/' .. eid, 'lane', ARGV[5], unpack(owner))
redis.call('PERSIST', key)
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], eid, 'PX', ARGV[6])
return eid
