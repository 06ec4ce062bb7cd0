-- record_sent.lua: a send the provider accepted (worker.DeliveryRecorder).
-- Creates or refreshes the task's record, links the provider's message id
-- to it, applies a status a callback brought before this record existed,
-- and counts the send once for its campaign. Joined after states.lua.
--
-- KEYS[1]: the task's record (hash); KEYS[2]: its campaign's counters
-- (hash); KEYS[3], only with a provider id: the message's index (hash:
-- task, group, and a pending state, code, reason, at)
-- ARGV[1..6]: task id, queue, channel, tenant, provider id (may be ""),
-- state (sent or sent_unconfirmed)
-- ARGV[7]: when, Unix ms; ARGV[8]: TTL of every key, ms; ARGV[9]: the counters' group
-- (tenant and campaign); ARGV[10]: campaign
-- Returns: 1 when the send was counted, 0 when the record had counted it.
local record, counters = KEYS[1], KEYS[2]
local ttl = ARGV[8]
local old = redis.call('HGET', record, 'state')
local fresh = rank(old) < 2
redis.call('HSET', record, 'task_id', ARGV[1], 'queue', ARGV[2], 'channel', ARGV[3], 'tenant', ARGV[4],
  'campaign', ARGV[10], 'provider_id', ARGV[5], 'sent_at', ARGV[7])
if fresh then
  redis.call('HSET', record, 'state', ARGV[6], 'code', '0', 'reason', '', 'at', ARGV[7])
  redis.call('HINCRBY', counters, 'sent', 1)
  -- A re-run of an archived task: it no longer counts as failed.
  if old == 'archived' then redis.call('HINCRBY', counters, 'failed', -1) end
elseif rank(old) == 2 then
  redis.call('HSET', record, 'state', ARGV[6])
end
if #KEYS >= 3 then
  local index = KEYS[3]
  local p = redis.call('HMGET', index, 'state', 'code', 'reason', 'at')
  if p[1] then
    apply(record, counters, p[1], p[2], p[3], p[4])
    redis.call('HDEL', index, 'state', 'code', 'reason', 'at')
  end
  redis.call('HSET', index, 'task', ARGV[1], 'group', ARGV[9])
  redis.call('PEXPIRE', index, ttl)
end
redis.call('PEXPIRE', record, ttl)
redis.call('PEXPIRE', counters, ttl)
if fresh then return 1 end
return 0
