-- update.lua: a status a provider reported in a callback. With the task
-- known (the message's index names it) the record moves up to the state
-- and the move is counted; before the worker recorded the send the state
-- waits in the index, for record_sent.lua. Joined after states.lua.
--
-- KEYS[1]: the message's index (hash); KEYS[2]: the task's record and
-- KEYS[3] its campaign's counters, as the index named them when the caller
-- read it (both only when it named a task)
-- ARGV[1]: the task id the caller read from the index ("" for none);
-- ARGV[7]: the counters' group it read
-- ARGV[2..5]: state, code, reason, at (Unix ms)
-- ARGV[6]: TTL of a pending state, ms; ARGV[8]: the counters' TTL, ms,
-- set when a move counted into counters that had none (they had expired
-- before the record: a store of another TTL wrote it)
-- Returns: {result, task id, sent at}: result 1 moved, 0 stale (the record
-- was already as far), 3 kept pending and moved it (no task yet), 2 no task
-- yet and the pending state was already as far, -1 the index changed
-- since the caller read it (read again); sent at is the record's sent_at
-- (Unix ms, "" when unknown), for the feedback of a throttle status.
local index = KEYS[1]
local cur = redis.call('HMGET', index, 'task', 'group')
local task, group = cur[1] or '', cur[2] or ''
if task ~= ARGV[1] or group ~= ARGV[7] then return {-1, task} end
if task == '' then
  local p = redis.call('HGET', index, 'state')
  if rank(ARGV[2]) > rank(p) then
    redis.call('HSET', index, 'state', ARGV[2], 'code', ARGV[3], 'reason', ARGV[4], 'at', ARGV[5])
    redis.call('PEXPIRE', index, ARGV[6])
    return {3, ''}
  end
  return {2, ''}
end
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, task} end
local moved = apply(KEYS[2], KEYS[3], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if moved == 1 and redis.call('PTTL', KEYS[3]) == -1 then redis.call('PEXPIRE', KEYS[3], ARGV[8]) end
return {moved, task, redis.call('HGET', KEYS[2], 'sent_at') or ''}
