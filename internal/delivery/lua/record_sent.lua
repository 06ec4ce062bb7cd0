-- record_sent.lua: sends the provider accepted (worker.DeliveryRecorder),
-- one or more in one call (Store.RecordSent coalesces the calls that
-- arrive while one is in flight). For each: creates or refreshes the
-- task's record, links the provider's message id to it, applies a status
-- a callback brought before this record existed, and counts the send once
-- for its campaign. Joined after states.lua.
--
-- ARGV[1]: the number of sends n; then per send, 12 values: the number of
-- its keys (2, or 3 with a provider id), task id, queue, channel, tenant,
-- provider id (may be ""), state (sent or sent_unconfirmed), when (Unix
-- ms), TTL of every key (ms), the counters' group (tenant and campaign),
-- campaign, and the counters' TTL (ms; the record's plus sent_batch.go's
-- countersEvery, so that they outlive every record written before their
-- next extension): positive to extend them, negative when the caller
-- extended them within countersEvery (they are then extended only if
-- this call may have made them).
-- KEYS, per send in order: the task's record (hash); its campaign's
-- counters (hash); only with a provider id, the message's index (hash:
-- task, group, and a pending state, code, reason, at).
-- Returns: per send, 1 when the send was counted, 0 when the record had
-- counted it.

-- extend_counters sets a campaign's counters' TTL once a call (every send
-- of a store has the same TTL), once they exist.
local counters_extended = {}
local function extend_counters(counters, ttl)
  if not counters_extended[counters] and redis.call('PEXPIRE', counters, ttl) == 1 then counters_extended[counters] = true end
end

-- record_one records one send: keys record, counters and index (nil
-- without a provider id), its values at ARGV[a..a+10]. Its counters are
-- extended when the caller asks, and whenever a write of this call may
-- have made the hash: a first "sent" (HINCRBY answers 1: the campaign's
-- first send counted, or its counters had expired), or a waiting status
-- applied (rare).
local function record_one(record, counters, index, a)
  local task, queue, channel, tenant, provider, state, at, ttl, group, campaign =
    ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9]
  local cttl = tonumber(ARGV[a + 10])
  local extend = cttl > 0
  if cttl < 0 then cttl = -cttl end
  local old = redis.call('HGET', record, 'state')
  local fresh = rank(old) < 2
  if not old then
    -- A new record leaves out code 0 and an empty reason: its readers
    -- (Store.Get, of this version and the ones before) read them so.
    redis.call('HSET', record, 'task_id', task, 'queue', queue, 'channel', channel, 'tenant', tenant,
      'campaign', campaign, 'provider_id', provider, 'sent_at', at, 'state', state, 'at', at)
  elseif fresh then
    redis.call('HSET', record, 'task_id', task, 'queue', queue, 'channel', channel, 'tenant', tenant,
      'campaign', campaign, 'provider_id', provider, 'sent_at', at, 'state', state, 'code', '0', 'reason', '', 'at', at)
  else
    redis.call('HSET', record, 'task_id', task, 'queue', queue, 'channel', channel, 'tenant', tenant,
      'campaign', campaign, 'provider_id', provider, 'sent_at', at)
    if rank(old) == 2 then redis.call('HSET', record, 'state', state) end
  end
  -- Each key gets its TTL right after its first write, so that a command
  -- failing later in the call (a key of another type) leaves none without.
  redis.call('PEXPIRE', record, ttl)
  if fresh then
    if redis.call('HINCRBY', counters, 'sent', 1) == 1 then extend = true end
    -- A re-run of an archived task: it no longer counts as failed.
    if old == 'archived' then redis.call('HINCRBY', counters, 'failed', -1) end
  end
  if extend then extend_counters(counters, cttl) end
  if index then
    -- (a waiting status always has a state: its other fields are read
    -- only then, the common case being an index the call makes)
    local pending = redis.call('HGET', index, 'state')
    if pending then
      local p = redis.call('HMGET', index, 'code', 'reason', 'at')
      apply(record, counters, pending, p[1], p[2], p[3])
      redis.call('HDEL', index, 'state', 'code', 'reason', 'at')
      extend_counters(counters, cttl) -- (the status applied may have made them)
    end
    redis.call('HSET', index, 'task', task, 'group', group)
    redis.call('PEXPIRE', index, ttl)
  end
  if fresh then return 1 end
  return 0
end

local out, k, a = {}, 1, 2
for i = 1, tonumber(ARGV[1]) do
  local nkeys = tonumber(ARGV[a])
  local index = nil
  if nkeys == 3 then index = KEYS[k + 2] end
  out[i] = record_one(KEYS[k], KEYS[k + 1], index, a + 1)
  k, a = k + nkeys, a + 12
end
return out
