-- Replay one dead letter: the job goes back to its lane with a fresh attempt budget.
-- KEYS[1] dead stream, KEYS[2] the slot guard; ARGV: entry_id, job_prefix, lane_prefix, job_id, lane_name, nf, [k v]*
-- Returns the new entry ID, false when the dead letter is gone, or {'live', status} when the job of that
-- id is live again (queued, running, retrying: submitted anew since): a replay must not take it over.
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return false end
local live = redis.call('HGET', ARGV[2] .. ARGV[4], 'status')
if live == 'queued' or live == 'running' or live == 'retrying' then return {'live', live} end
local nf = tonumber(ARGV[6])
local fields = {}
for j = 1, 2 * nf do fields[j] = ARGV[6 + j] end
local eid = redis.call('XADD', ARGV[3] .. ARGV[5], '*', unpack(fields))
local key = ARGV[2] .. ARGV[4]
local att = tonumber(redis.call('HGET', key, 'attempts')) or 0
redis.call('HDEL', key, 'result', 'error', 'usage', 'finished_at')
redis.call('HSET', key, 'status', 'queued', 'base', att, 'attempts', att, 'source', ARGV[5] .. '/' .. eid, 'lane', ARGV[5])
redis.call('PERSIST', key)
redis.call('XDEL', KEYS[1], ARGV[1])
return eid
