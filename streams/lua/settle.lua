-- Settle a batch of entries atomically: the one place results, records, acks and dead letters are written.
-- KEYS: results, dead, delayed, the slot guard; ARGV: job_prefix, group, max_result_bytes (a workflow's result), job_ttl_s, lane_prefix, ops
-- where ops is one JSON array (all values strings) of:
--   ["done", lane, eid, src, jid, [k, v, ...], [dead k, v, ...], alt, parent, step, keep_usage]  terminal result (fenced),
--        optional dead letter; alt (id-less requests): the job id to use when jid's record belongs to another entry;
--        parent, step (workflow steps): the fan-in runs in the same call (workflow.lua, prepended)
--   ["retry", lane, eid, src, jid, delay_ms, member, error, usage]  back to the delayed set (fenced), due delay_ms from
--        now by Redis' clock (promote.lua reads the same clock: workers' clocks may differ); usage ('' = none):
--        of the attempts so far, kept in the record for the next attempt (streams/usage.py)
--   ["handback", lane, eid, src, jid, [k, v, ...], usage, worker]   re-add at once, to the lane's resumed stream (read just
--        before the lane: it waited its turn once), attempt not counted (fenced);
--        only while the entry is pending under worker and the record names it: an entry another consumer took over
--        (XAUTOCLAIM) is that consumer's to run and settle, so it is neither re-added nor acked (answers 0)
--   ["drop", lane, eid]                                             ack only (duplicates)
-- A done, retry or handback op of a job whose tenant is capped ends with {tenant, cap, reserve_ms}: once it writes, the
-- job's slot is freed and parked jobs that now fit are let go (a hand-back keeps its slot: tenant_cap.lua).
-- The fence: an op on a job whose record is terminal, or now owned by another entry, only acks (a done or retry op
-- that finds its own write already made, as a copy of this call does, answers 1 all the same).
-- Acked entries leave the lane with the periodic trim (trim.lua), not one XDEL each.
-- Returns per op 1 when it wrote, 0 when it only acked, {1, status, duration_ms} when a step ended its workflow; for
-- the ops up to the one after which the call's workflow work passed its share (WF_CALL_WORK): the caller sends the rest again.
local results, dead, delayed = KEYS[1], KEYS[2], KEYS[3]
local job_prefix, group, max_result, ttl, lane_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local terminal = {completed = true, failed = true, rejected = true, expired = true}
local out = {}
local acks = {}  -- lane -> entry ids, acked together at the end (the script is atomic either way)
local C = wf_context(job_prefix, lane_prefix, results, dead, max_result, ttl)
local function fenced_by(rec, src)
  return (rec[1] and terminal[rec[1]]) or (rec[2] and rec[2] ~= src) or false
end
-- The record's status, source and error, then its values of the result's fields (in their order);
-- and whether the result carries an error of its own. A run taken over counted its attempt in the record, and
-- this one ended first: the record's count stands in the result too.
local function record_of(key, res)
  local names, has_error, attempts = {'status', 'source', 'error'}, false, nil
  for i = 1, #res, 2 do
    names[#names + 1] = res[i]
    if res[i] == 'error' then has_error = true elseif res[i] == 'attempts' then attempts = i end
  end
  local rec = redis.call('HMGET', key, unpack(names))
  if attempts then
    local kept = rec[3 + (attempts + 1) / 2]
    if (tonumber(kept) or 0) > (tonumber(res[attempts + 1]) or 0) then res[attempts + 1] = kept end
  end
  return rec, has_error
end
-- The record fields the result changes: a replica is sent every field written, so the ones the record
-- already holds (agent, submitted_at, started_at, worker, ...) are not written again. The id is the key's.
local function changed_fields(rec, res, src)
  local out = {}
  if rec[2] ~= src then out[1] = 'source'; out[2] = src end
  for i = 1, #res, 2 do
    local name, value = res[i], res[i + 1]
    if name ~= 'id' and rec[3 + (i + 1) / 2] ~= value then out[#out + 1] = name; out[#out + 1] = value end
  end
  return out
end
for _, op in ipairs(cjson.decode(ARGV[6])) do
  local kind, lane, eid = op[1], op[2], op[3]
  local ack = true
  if kind == 'drop' then
    out[#out + 1] = 0
  elseif kind == 'done' then
    local jid, res, dl = op[5], op[6], op[7]
    if op[8] and op[8] ~= '' then
      local owner = redis.call('HGET', job_prefix .. jid, 'source')
      if owner and owner ~= op[4] then
        jid = op[8]
        for i = 1, #res, 2 do if res[i] == 'id' then res[i + 1] = jid end end
        for i = 1, #dl, 2 do if dl[i] == 'id' then dl[i + 1] = jid end end
      end
    end
    local key = job_prefix .. jid
    if op[11] == '1' then  -- rejected at claim (no attempt of its own): a retry's earlier attempts' usage still counts
      local before = redis.call('HMGET', key, 'usage', 'status', 'source')
      local okj, use = pcall(cjson.decode, before[1] or '')
      if okj and type(use) == 'table' and not terminal[before[2] or ''] and before[3] == op[4] then
        res[#res + 1] = 'usage'; res[#res + 1] = before[1]
      end
    end
    local rec, has_error = record_of(key, res)
    if fenced_by(rec, op[4]) then
      -- 1 when this very op ran before (a copy of the call, sent again after a lost reply): the record, still this
      -- entry's, holds all it writes. It wrote then; nothing is written twice.
      out[#out + 1] = (rec[2] == op[4] and #changed_fields(rec, res, op[4]) == 0) and 1 or 0
    else
      redis.call('XADD', results, '*', unpack(res))  -- no MAXLEN: trim_results.lua keeps what groups need
      if rec[3] and not has_error then redis.call('HDEL', key, 'error') end  -- an earlier attempt's error
      local changed = changed_fields(rec, res, op[4])
      if #changed > 0 then redis.call('HSET', key, unpack(changed)) end
      redis.call('EXPIRE', key, ttl)
      local dead_id = false
      if #dl > 0 then dead_id = redis.call('XADD', dead, '*', unpack(dl)) end
      out[#out + 1] = 1
      if op[9] and op[9] ~= '' then out[#out] = wf_step_settled(C, jid, op[9], op[10], res, dead_id) end
      tc_release(job_prefix, lane_prefix, op[12], jid, false)
    end
  elseif kind == 'retry' then
    local jid = op[5]
    local rec = redis.call('HMGET', job_prefix .. jid, 'status', 'source', 'retry_delay')
    if fenced_by(rec, op[4]) then
      -- 1 when this very op ran before (a copy of the call): its retry waits in the delayed set, with its delay (another
      -- ending of the same attempt asks another)
      local mine = rec[1] == 'retrying' and rec[2] == 'delayed:' .. redis.sha1hex(op[7]) and rec[3] == op[6]
        and redis.call('ZSCORE', delayed, op[7]) ~= false
      out[#out + 1] = mine and 1 or 0
    else
      redis.call('ZADD', delayed, now_ms() + tonumber(op[6]), op[7])  -- Redis' clock (groups.lua)
      -- the source names the member: promote.lua moves a retry only while the record still names it
      local w = {'status', 'retrying', 'error', op[8], 'source', 'delayed:' .. redis.sha1hex(op[7]), 'retry_delay', op[6]}
      if op[9] and op[9] ~= '' then w[9], w[10] = 'usage', op[9] end
      redis.call('HSET', job_prefix .. jid, unpack(w))
      out[#out + 1] = 1
      tc_release(job_prefix, lane_prefix, op[10], jid, false)
    end
  elseif kind == 'handback' then
    local jid, worker = op[5], op[8]
    local pel = redis.call('XPENDING', lane, group, eid, eid, 1)
    local rec = redis.call('HMGET', job_prefix .. jid, 'status', 'source', 'worker')
    if not pel[1] or pel[1][2] ~= worker or (rec[3] and rec[3] ~= worker) then
      -- not ours: left unacked to the consumer that holds it. 1 when this very op ran before (a copy of the call):
      -- the entry it acked is no longer pending, and the record, queued on the copy it added, still names this worker.
      ack = false
      out[#out + 1] = (not pel[1] and rec[1] == 'queued' and rec[2] ~= op[4] and rec[3] == worker) and 1 or 0
    elseif fenced_by(rec, op[4]) then
      out[#out + 1] = 0
    else
      local resumed = resumed_of(string.sub(lane, #lane_prefix + 1))
      local new = redis.call('XADD', lane_prefix .. resumed, '*', unpack(op[6]))
      local key = job_prefix .. jid
      local att = tonumber(redis.call('HGET', key, 'attempts')) or 1
      local w = {'status', 'queued', 'attempts', math.max(att - 1, 0), 'source', resumed .. '/' .. new}
      if op[7] and op[7] ~= '' then w[7], w[8] = 'usage', op[7] end  -- the interrupted attempt's calls, paid too
      redis.call('HSET', key, unpack(w))
      out[#out + 1] = 1
      tc_release(job_prefix, lane_prefix, op[9], jid, true)
    end
  else
    return redis.error_reply('settle: unknown op ' .. tostring(kind))
  end
  if ack then
    local ids = acks[lane]
    if not ids then ids = {}; acks[lane] = ids end
    ids[#ids + 1] = eid
  end
  if wf_call_full(C) then break end  -- the rest of the ops in another call (workflow.lua: WF_CALL_WORK)
end
for lane, ids in pairs(acks) do redis.call('XACK', lane, group, unpack(ids)) end  -- one XACK per lane, not per entry
return out
