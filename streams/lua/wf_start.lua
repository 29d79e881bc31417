-- Start a batch of claimed workflow entries of one lane (workflow.lua is prepended): write each workflow's
-- state, publish its runnable steps and ack its entry, all at once; a replayed workflow resumes (completed
-- steps keep their results, the others run again).
-- KEYS: lane stream, results, dead, timeouts, the slot guard (publish.lua says why); ARGV: job_prefix, lane_prefix, lane_name, group, worker, ttl,
-- max_result_bytes, workflows as one JSON array of
--   [entry_id, job_id, explicit ('1' when the request named its id), submitted_at, on_failure, timeout_s ('' = none),
--    webhook, tenant, traceparent ('' = none), request JSON, the entry its producer wrote (this one, unless re-added:
--    a replay's), steps: [[id, agent, n_after, after JSON, kids JSON, request fields JSON ([k, v, ...])], ...]]
-- An id-less workflow's job id is its generated id ('<entry ID>', ':<p>' after it with partitions); when a record of
-- it belongs to another entry, '<lane>:' goes in front, as publish.lua names it (so it still names its partition).
-- Every key is KEYS[1]'s partition's (one slot): job and workflow keys come from the partition's prefixes.
-- Returns per workflow {decision, job_id, steps published}: decision run, resume, dup, or completed (a resume with
-- nothing left to run ended it).
local lane, timeouts = KEYS[1], KEYS[4]
local job_prefix, lane_prefix, lane_name, group, worker = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local C = wf_context(job_prefix, lane_prefix, KEYS[2], KEYS[3], ARGV[7], ARGV[6])
local now = wf_now()
local out = {}
for _, w in ipairs(cjson.decode(ARGV[8])) do
  local eid, jid, explicit = w[1], w[2], w[3]
  local me = lane_name .. '/' .. eid
  local key = job_prefix .. jid
  local rec = redis.call('HMGET', key, 'status', 'source', 'attempts')
  if explicit ~= '1' and rec[2] and rec[2] ~= me then
    jid = lane_name .. ':' .. jid
    key = job_prefix .. jid
    rec = redis.call('HMGET', key, 'status', 'source', 'attempts')
  end
  if rec[1] and (WF_ENDED[rec[1]] or rec[1] == 'running' or (rec[2] and rec[2] ~= me)) then
    out[#out + 1] = {'dup', jid, 0}
  else
    local h = C.wf_prefix .. jid
    local att = (tonumber(rec[3]) or 0) + 1
    local steps, published, decision = w[12], 0, 'run'
    local done, ok = 0, 0
    if redis.call('EXISTS', h) == 0 then
      local order = {}
      local hs = {'order', '', 'total', #steps, 'lane', lane_name, 'on_failure', w[5], 'timeout_s', w[6],
        'submitted_at', w[4], 'request', w[10]}
      for i, s in ipairs(steps) do
        local sid = s[1]
        order[i] = sid
        -- A step record left by an earlier workflow of this id (its own record expired first: a step that ended after
        -- it has a later expiry) is that run's: its result, usage and tenant must not show through this one's.
        redis.call('DEL', job_prefix .. wf_step_id(jid, sid))
        local n = #hs
        hs[n + 1], hs[n + 2], hs[n + 3], hs[n + 4], hs[n + 5], hs[n + 6] = sid .. '|st', 'pending', sid .. '|agent', s[2], sid .. '|deps', s[3]
        hs[n + 7], hs[n + 8], hs[n + 9], hs[n + 10], hs[n + 11], hs[n + 12] = sid .. '|after', s[4], sid .. '|kids', s[5], sid .. '|req', s[6]
        if #hs > 6000 then  -- unpack's limit is ~8000 values
          redis.call('HSET', h, unpack(hs))
          hs = {}
        end
      end
      hs[#hs + 1], hs[#hs + 2] = 'order', cjson.encode(order)
      redis.call('HSET', h, unpack(hs))
      for _, name in ipairs({'webhook', 'tenant', 'traceparent'}) do
        local v = w[({webhook = 7, tenant = 8, traceparent = 9})[name]]
        if v ~= '' then redis.call('HSET', h, name, v) end
      end
    else  -- a replay: keep what completed, run the rest again
      decision = 'resume'
      redis.call('HDEL', h, 'inputs_bytes')  -- the steps published again get the workflow's inputs budget afresh
      for _, sid in ipairs(cjson.decode(redis.call('HGET', h, 'order'))) do
        local st = redis.call('HGET', h, sid .. '|st')
        if st == 'completed' then
          ok = ok + 1
        elseif st ~= 'queued' then  -- queued: still running from the earlier run; it settles into this one
          local dead_id = redis.call('HGET', h, sid .. '|dead')
          if dead_id then redis.call('XDEL', C.dead, dead_id) end
          -- its usage, written after the last event (it ended after its workflow), is counted by the next one
          local late = redis.call('HGET', h, sid .. '|use')
          if late then redis.call('HSET', h, sid .. '|use0', late) end
          redis.call('HDEL', h, sid .. '|res', sid .. '|err', sid .. '|use', sid .. '|dead')
          local alone = redis.call('HGET', job_prefix .. wf_step_id(jid, sid), 'status')
          if alone == 'queued' or alone == 'running' or alone == 'retrying' then
            -- replayed alone and not ended: that run is this one's, it settles into it. Published again, it was taken
            -- over and its result fenced off: no event for the replay, and a second run of the job paid for.
            redis.call('HSET', h, sid .. '|st', 'queued')
          else
            redis.call('HSET', h, sid .. '|st', 'pending')
          end
        end
      end
      done = ok
      for _, sid in ipairs(cjson.decode(redis.call('HGET', h, 'order'))) do
        if redis.call('HGET', h, sid .. '|st') == 'pending' then
          local deps = 0
          for _, a in ipairs(cjson.decode(redis.call('HGET', h, sid .. '|after'))) do
            if redis.call('HGET', h, a .. '|st') ~= 'completed' then deps = deps + 1 end
          end
          redis.call('HSET', h, sid .. '|deps', deps)
        end
      end
      redis.call('HDEL', h, 'first_error')
      redis.call('PERSIST', h)
    end
    redis.call('HSET', h, 'status', 'running', 'done', done, 'ok', ok, 'attempts', att, 'started_at', now,
      'source_stream', lane, 'source_id', eid, 'first_source_id', w[11])
    redis.call('HSET', key, 'status', 'running', 'agent', 'workflow', 'attempts', att, 'started_at', now,
      'worker', worker, 'source', me, 'submitted_at', w[4], 'lane', lane_name,
      'steps_total', redis.call('HGET', h, 'total'), 'steps_done', done)
    if decision == 'run' then
      for _, s in ipairs(steps) do
        if s[3] == 0 then
          wf_publish(C, h, jid, s[1], now, {s[6], s[4], lane_name, s[2]})
          published = published + 1
        end
      end
    else
      for _, sid in ipairs(cjson.decode(redis.call('HGET', h, 'order'))) do
        if redis.call('HGET', h, sid .. '|st') == 'pending' and tonumber(redis.call('HGET', h, sid .. '|deps')) == 0 then
          wf_publish(C, h, jid, sid, now)
          published = published + 1
        end
      end
    end
    local ended = false
    if decision == 'resume' and published == 0 and ok >= tonumber(redis.call('HGET', h, 'total')) then
      -- Every step completed after the run ended (an expiry overtook them): nothing to run, so it ends here, not
      -- at its next timeout
      wf_end(C, h, jid, 'completed', nil, worker)
      ended = true
      decision = 'completed'
    end
    local timeout = redis.call('HGET', h, 'timeout_s')
    if not ended and timeout and timeout ~= '' then
      redis.call('ZADD', timeouts, now + math.floor(tonumber(timeout) * 1000), jid)
    else  -- an earlier run of this id (its records expired since) may have left its timeout due: not this run's
      redis.call('ZREM', timeouts, jid)
    end
    out[#out + 1] = {decision, jid, published}
  end
  redis.call('XACK', lane, group, eid)
end
return out
