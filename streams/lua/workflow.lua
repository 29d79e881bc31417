-- Workflow fan-out / fan-in (contract §9): a library prepended to settle.lua, wf_start.lua and wf_expire.lua.
-- One hash per workflow, <prefix>:wf:<id> (wf_prefix is the job prefix's '<prefix>:' + 'wf:'), holding
--   status (running|completed|failed|expired), lane, on_failure, timeout_s, order (JSON step ids), total, done, ok, inputs_bytes,
--   submitted_at, started_at, attempts, webhook, tenant, traceparent, request, source_stream, source_id (the entry it
--   last ran from), first_source_id (the entry its producer wrote; absent when an older release started it), first_error
-- and per step '<step>|st' (pending|queued|completed|failed|rejected|expired|skipped), '|res' (raw JSON result),
--   '|err', '|use' (usage JSON), '|dead' (its dead letter's entry ID), '|deps' (after-steps not yet completed),
--   '|after', '|kids' (JSON lists), '|req' (JSON list of the step request's fields), '|agent'.
-- A step job's id is '<workflow id>::<step id>' (streams.workflow.step_job_id): its partition is its workflow's.
-- Keys are built only from the prefixes and ids, so with partitions every key has the hash tag of the caller's
-- KEYS[1] (one slot: the partition's).
local WF_INPUTS_SHARES = 16  -- a workflow's steps' inputs together: this many times STREAMCREW_MAX_RESULT_BYTES
-- The workflow work one call does before it stops (settle.lua after the op, wf_expire.lua after the workflow) and leaves
-- the rest to the next call, so Redis answers its other clients in between: a byte of inputs or of a workflow's result
-- counts 1, a step published, ended or skipped WF_STEP_WORK. Unbounded, one settle call that published the dependents of
-- 50 wide workflows' roots held Redis ~11 s (BUSY for every client); one expiry of 100 workflows of 1,000 steps, 1.4 s.
-- One op or workflow is never split: its own work is bounded by the workflow limits (1,000 steps, WF_INPUTS_SHARES).
local WF_CALL_WORK = 4 * 1048576
local WF_STEP_WORK = 1024
local WF_ENDED = {completed = true, failed = true, rejected = true, expired = true, skipped = true}

local function wf_step_id(wid, sid)
  return wid .. '::' .. sid
end

-- max_result: bytes of step results a workflow's result repeats at most (STREAMCREW_MAX_RESULT_BYTES).
local function wf_context(job_prefix, lane_prefix, results, dead, max_result, ttl)
  return {job_prefix = job_prefix, wf_prefix = string.sub(job_prefix, 1, #job_prefix - 4) .. 'wf:',
          timeouts = string.sub(job_prefix, 1, #job_prefix - 4) .. 'workflows:timeouts',
          lane_prefix = lane_prefix, results = results, dead = dead, max_result = tonumber(max_result), ttl = ttl,
          work = 0}
end

-- Whether this call did its share of workflow work (WF_CALL_WORK): its caller stops after the op in hand.
local function wf_call_full(C)
  return C.work >= WF_CALL_WORK
end

local function wf_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Publish one step to the workflow's lane; its 'after' steps' results travel as the field 'inputs'.
-- p (optional, a fresh start): {req, after, lane, agent} as the caller has them, so nothing is read back.
local function wf_publish(C, h, wid, sid, now, p)
  C.work = C.work + WF_STEP_WORK
  local f = p or redis.call('HMGET', h, sid .. '|req', sid .. '|after', 'lane', sid .. '|agent')
  local fields = cjson.decode(f[1])
  local jid = wf_step_id(wid, sid)
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4], fields[n + 5], fields[n + 6] = 'id', jid, 'parent', wid, 'step', sid
  local after = cjson.decode(f[2])
  if #after > 0 then
    local names = {}
    for i, a in ipairs(after) do names[i] = a .. '|res' end
    local got = redis.call('HMGET', h, unpack(names))
    local size = 2 * #after + 1  -- the inputs' encoded size, counted before it is built: braces, colons, commas
    for i, a in ipairs(after) do size = size + #cjson.encode(a) + #(got[i] or 'null') end
    -- Not built past a step's limit, or the workflow's (WF_INPUTS_SHARES of it for all its steps together,
    -- so one settle publishing a wide fan-out never copies gigabytes): the worker rejects the step
    -- (streams.envelope.INPUTS_OMITTED).
    local spent = size <= C.max_result and redis.call('HINCRBY', h, 'inputs_bytes', size) or 0
    if size > C.max_result then
      fields[#fields + 1] = 'inputs_omitted'
      fields[#fields + 1] = tostring(size)
    elseif spent > C.max_result * WF_INPUTS_SHARES then
      redis.call('HINCRBY', h, 'inputs_bytes', -size)
      fields[#fields + 1] = 'inputs_omitted'
      fields[#fields + 1] = 'workflow:' .. spent
    else
      local parts = {}
      for i, a in ipairs(after) do parts[i] = cjson.encode(a) .. ':' .. (got[i] or 'null') end
      C.work = C.work + size
      fields[#fields + 1] = 'inputs'
      fields[#fields + 1] = '{' .. table.concat(parts, ',') .. '}'
    end
  end
  local lane = f[3]
  local eid = redis.call('XADD', C.lane_prefix .. lane, '*', unpack(fields))
  local key = C.job_prefix .. jid
  local att = 0
  if not p then
    local was = redis.call('HMGET', key, 'attempts', 'finished_at')
    att = tonumber(was[1]) or 0
    if att > 0 or was[2] then  -- a replay's rerun (or a step skipped while queued): fresh budget, the old outcome gone
      redis.call('HDEL', key, 'result', 'error', 'usage', 'finished_at', 'started_at', 'worker')
      redis.call('PERSIST', key)
    end
  end
  local rec = {'status', 'queued', 'agent', f[4], 'attempts', att, 'base', att, 'submitted_at', now,
    'source', lane .. '/' .. eid, 'lane', lane, 'parent', wid, 'step', sid}
  local unowned = {tenant = true, traceparent = true}
  for i = 1, n, 2 do  -- readers (a tenant-bound API key) know whose step it is from the start
    if unowned[fields[i]] then
      unowned[fields[i]] = nil
      rec[#rec + 1] = fields[i]
      rec[#rec + 1] = fields[i + 1]
    end
  end
  for name in pairs(unowned) do redis.call('HDEL', key, name) end  -- never another run's, whoever wrote the record
  redis.call('HSET', key, unpack(rec))
  redis.call('HSET', h, sid .. '|st', 'queued')
end

-- A usage object's token count when it is one (a whole number, 0 .. 2^53), else 0: '|use' is Redis data anyone may write.
local function wf_tokens(v)
  local n = tonumber(v)
  if n and n >= 0 and n < 2^53 and n == math.floor(n) then return n end
  return 0
end

-- Write the workflow's one result event (and dead letter unless completed); steps that have not started are
-- skipped. Returns {1, status, duration_ms}.
local function wf_end(C, h, wid, status, err, worker)
  local now = wf_now()
  local m = redis.call('HMGET', h, 'order', 'total', 'started_at', 'submitted_at', 'webhook', 'tenant', 'traceparent',
    'attempts', 'request', 'source_stream', 'source_id', 'first_source_id', 'timeout_s')
  -- ended: out of the timeouts set now, not once its timeout is due (wf_expire.lua), which kept every such workflow there
  if m[13] and m[13] ~= '' then redis.call('ZREM', C.timeouts, wid) end
  local order = cjson.decode(m[1])
  local names = {}
  for i, sid in ipairs(order) do
    names[5 * i - 4], names[5 * i - 3], names[5 * i - 2], names[5 * i - 1], names[5 * i] =
      sid .. '|st', sid .. '|res', sid .. '|err', sid .. '|use', sid .. '|use0'
  end
  local all = redis.call('HMGET', h, unpack(names))
  local parts, ok, done = {}, 0, 0
  local room = C.max_result  -- a step result that would take the workflow's result past it is left out (its own record keeps it)
  -- The workflow's usage sums its steps' (those whose result carried usage), mirroring a job's ledger
  -- (agents/usage.py): cost_usd is unknown (null) as soon as one step's is null or absent, never a guess;
  -- 'offline': true when any step's usage has it (a job's rule: one offline call marks the job), so a total
  -- never passes offline answers off as a real model's, whether every step or only some ran offline;
  -- model: the distinct model names of all steps (a step's own list split at ','), sorted, comma-separated.
  -- A step's usage is summed into one result event only: the fields summed are deleted once it is written, so a
  -- replay's event counts the steps run since (as a replayed job's counts its new run), and summed over the
  -- workflow's events each step's calls count once.
  local u = {prompt_tokens = 0, completion_tokens = 0, cost_usd = 0}
  local models, used, offline, summed = {}, false, false, {}
  for i, sid in ipairs(order) do
    local s = {all[5 * i - 4], all[5 * i - 3], all[5 * i - 2], all[5 * i - 1], all[5 * i]}
    local st = s[1]
    if st == 'pending' then
      st = 'skipped'
      redis.call('HSET', h, sid .. '|st', st)
    elseif st == 'queued' then
      local key = C.job_prefix .. wf_step_id(wid, sid)
      local j = redis.call('HMGET', key, 'status', 'usage')
      local js = j[1]
      if js == 'queued' or not js then  -- waiting in its lane: it will never start (start.lua sees another source)
        st = 'skipped'
        s[4] = j[2]  -- a drain handed it back after calls it paid (streams/usage.py): this event counts them, no other will
        redis.call('HSET', key, 'status', st, 'source', 'skipped', 'finished_at', now)
        redis.call('EXPIRE', key, C.ttl)
        redis.call('HSET', h, sid .. '|st', st)
      else
        st = js  -- running or retrying: it runs on and yields its own result event
      end
    end
    if WF_ENDED[st] then done = done + 1 end
    local entry
    if st == 'completed' then
      ok = ok + 1
      local raw = s[2] or 'null'
      if #raw > room then
        entry = '{"status":"completed","result":null,"result_omitted":' .. #raw .. '}'
      else
        room = room - #raw
        entry = '{"status":"completed","result":' .. raw .. '}'
      end
    elseif s[3] and #s[3] > room then  -- errors share the room (each is at most 4,096 characters, 1,000 steps...)
      entry = '{"status":' .. cjson.encode(st) .. ',"error":null,"error_omitted":' .. #s[3] .. '}'
    elseif s[3] then
      room = room - #s[3]
      entry = '{"status":' .. cjson.encode(st) .. ',"error":' .. cjson.encode(s[3]) .. '}'
    else
      entry = '{"status":' .. cjson.encode(st) .. '}'
    end
    parts[i] = cjson.encode(sid) .. ':' .. entry
    for j, field in ipairs({'|use', '|use0'}) do  -- '|use0': a step that ended after the last event, then run again
      local raw = s[3 + j]
      if raw then
        summed[#summed + 1] = sid .. field
        local okj, use = pcall(cjson.decode, raw)
        if okj and type(use) == 'table' then
          used = true
          u.prompt_tokens = u.prompt_tokens + wf_tokens(use.prompt_tokens)
          u.completion_tokens = u.completion_tokens + wf_tokens(use.completion_tokens)
          local cost = tonumber(use.cost_usd)  -- nil for JSON null (cjson.null) or absent
          if cost and not (cost >= 0 and cost < 1e12) then cost = nil end  -- NaN, inf, negative: cjson cannot write a total of them
          if cost == nil or u.cost_usd == cjson.null then
            u.cost_usd = cjson.null
          else
            u.cost_usd = u.cost_usd + cost
          end
          if use.offline == true then offline = true end
          if type(use.model) == 'string' then
            for name in string.gmatch(use.model, '[^,]+') do models[name] = true end
          end
        end
      end
    end
  end
  local total = tonumber(m[2])
  local result = '{"steps":{' .. table.concat(parts, ',') .. '},"summary":"' .. ok .. ' of ' .. total .. ' steps completed"}'
  C.work = C.work + WF_STEP_WORK * #order + #result
  local ev = {'id', wid, 'agent', 'workflow', 'status', status, 'result', result, 'attempts', m[8] or '1',
    'submitted_at', m[4], 'started_at', m[3], 'finished_at', now}
  if err and status ~= 'completed' then ev[#ev + 1] = 'error'; ev[#ev + 1] = err end
  if worker and worker ~= '' then ev[#ev + 1] = 'worker'; ev[#ev + 1] = worker end
  if used then
    local names = {}
    for name in pairs(models) do names[#names + 1] = name end
    table.sort(names)
    u.model = table.concat(names, ',')
    if u.cost_usd ~= cjson.null then u.cost_usd = math.floor(u.cost_usd * 1e8 + 0.5) / 1e8 end  -- as a job's
    if offline then u.offline = true end
    ev[#ev + 1] = 'usage'; ev[#ev + 1] = cjson.encode(u)
  end
  for _, name in ipairs({'webhook', 'tenant', 'traceparent'}) do
    local v = m[({webhook = 5, tenant = 6, traceparent = 7})[name]]
    if v then ev[#ev + 1] = name; ev[#ev + 1] = v end
  end
  redis.call('XADD', C.results, '*', unpack(ev))  -- no MAXLEN: trim_results.lua keeps what groups still need
  if #summed > 0 then redis.call('HDEL', h, unpack(summed)) end
  local key = C.job_prefix .. wid
  redis.call('HDEL', key, 'error')
  redis.call('HSET', key, 'steps_done', done, unpack(ev, 3))  -- not ev's 'id': a record's id is its key's, as settle.lua's
  redis.call('EXPIRE', key, C.ttl)
  redis.call('HSET', h, 'status', status, 'done', done, 'ok', ok)
  redis.call('EXPIRE', h, C.ttl)
  if status ~= 'completed' then
    redis.call('XADD', C.dead, '*', 'id', wid, 'agent', 'workflow', 'reason', status == 'expired' and 'expired' or 'step_failed',
      'error', err or status, 'source_stream', m[10] or '', 'source_id', m[12] or m[11] or '', 'last_source_id', m[11] or '',
      'attempts', m[8] or '1', 'dead_at', now, 'request', m[9] or '{}')  -- the sources as a job's letter names them (contract §3)
  end
  return {1, status, now - (tonumber(m[3]) or now)}
end

-- Mark the not-yet-runnable dependents of a failed step skipped (on_failure continue); returns how many.
local function wf_skip_dependents(h, sid)
  local n, queue, seen = 0, {sid}, {}
  while #queue > 0 do
    local cur = table.remove(queue)
    for _, kid in ipairs(cjson.decode(redis.call('HGET', h, cur .. '|kids'))) do
      if not seen[kid] then
        seen[kid] = true
        if redis.call('HGET', h, kid .. '|st') == 'pending' then
          redis.call('HSET', h, kid .. '|st', 'skipped')
          n = n + 1
          queue[#queue + 1] = kid
        end
      end
    end
  end
  return n
end

-- The fan-in: called by settle.lua in the same call that wrote a step's result event.
-- Returns 1, or {1, status, duration_ms} when this step ended its workflow.
local function wf_step_settled(C, jid, wid, sid, res, dead_id)
  if jid ~= wf_step_id(wid, sid) then return 1 end  -- 'parent' and 'step' fields on some other job: not a step
  local h = C.wf_prefix .. wid
  local meta = redis.call('HMGET', h, 'status', sid .. '|st', 'on_failure', 'total')
  -- Only a step the workflow published and that has not settled counts: not a forged request for a step
  -- still pending, not a step's own dead letter replayed (replay the workflow's instead).
  if meta[2] ~= 'queued' then
    -- A step that ended badly, replayed alone, ended badly again: its new letter is the one a replay of the workflow
    -- removes as it runs the step again (the lone replay removed the first). Before, it stayed, stranded.
    if dead_id and meta[2] and meta[2] ~= 'completed' and WF_ENDED[meta[2]] then redis.call('HSET', h, sid .. '|dead', dead_id) end
    return 1
  end
  local v = {}
  for i = 1, #res, 2 do v[res[i]] = res[i + 1] end
  local st = v.status
  local w = {sid .. '|st', st}
  if v.result then w[#w + 1] = sid .. '|res'; w[#w + 1] = v.result end
  if v.error then w[#w + 1] = sid .. '|err'; w[#w + 1] = v.error end
  if v.usage then w[#w + 1] = sid .. '|use'; w[#w + 1] = v.usage end
  if dead_id then w[#w + 1] = sid .. '|dead'; w[#w + 1] = dead_id end
  redis.call('HSET', h, unpack(w))
  -- Ended already (fail fast, expiry): the outcome is kept for a replay, nothing else moves.
  if meta[1] ~= 'running' then return 1 end
  local done = redis.call('HINCRBY', h, 'done', 1)
  local total = tonumber(meta[4])
  if st == 'completed' then
    redis.call('HINCRBY', h, 'ok', 1)
    local now = nil
    for _, kid in ipairs(cjson.decode(redis.call('HGET', h, sid .. '|kids'))) do
      if redis.call('HINCRBY', h, kid .. '|deps', -1) <= 0 and redis.call('HGET', h, kid .. '|st') == 'pending' then
        now = now or wf_now()
        wf_publish(C, h, wid, kid, now)
      end
    end
  else
    local err = 'step ' .. sid .. ' ' .. st .. ': ' .. (v.error or st)
    if meta[3] ~= 'continue' then
      return wf_end(C, h, wid, 'failed', err, v.worker)
    end
    redis.call('HSETNX', h, 'first_error', err)
    local skipped = wf_skip_dependents(h, sid)
    C.work = C.work + WF_STEP_WORK * skipped
    done = redis.call('HINCRBY', h, 'done', skipped)
  end
  redis.call('HSET', C.job_prefix .. wid, 'steps_done', done)
  if done >= total then
    local ok = tonumber(redis.call('HGET', h, 'ok'))
    if ok >= total then return wf_end(C, h, wid, 'completed', nil, v.worker) end
    return wf_end(C, h, wid, 'failed', (total - ok) .. ' of ' .. total .. ' steps did not complete; first: ' ..
      (redis.call('HGET', h, 'first_error') or '?'), v.worker)
  end
  return 1
end
