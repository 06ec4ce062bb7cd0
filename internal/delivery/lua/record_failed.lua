-- record_failed.lua: a task the worker gave up on (archived). Never
-- overwrites the record of a send the provider accepted; counts the task
-- as failed once for its campaign.
--
-- KEYS[1]: the task's record (hash); KEYS[2]: its campaign's counters (hash)
-- ARGV[1..4]: task id, queue, channel, tenant
-- ARGV[5]: the provider's error code (0: none); ARGV[6]: the reason
-- ARGV[7]: when, Unix ms; ARGV[8]: TTL of both keys, ms; ARGV[9]: the counters'
-- group (unused here: KEYS[2] is its counters); ARGV[10]: campaign;
-- ARGV[11]: the counters' TTL, ms (the record's and a little more: they
-- outlive every record of theirs)
-- Returns: 1 when recorded, 0 when the record was of an accepted send.
local record, counters = KEYS[1], KEYS[2]
local old = redis.call('HGET', record, 'state')
if old and old ~= 'archived' and old ~= 'queued' then return 0 end
redis.call('HSET', record, 'task_id', ARGV[1], 'queue', ARGV[2], 'channel', ARGV[3], 'tenant', ARGV[4],
  'campaign', ARGV[10], 'state', 'archived', 'code', ARGV[5], 'reason', ARGV[6], 'at', ARGV[7])
redis.call('PEXPIRE', record, ARGV[8])
if old ~= 'archived' then redis.call('HINCRBY', counters, 'failed', 1) end
redis.call('PEXPIRE', counters, ARGV[11])
return 1
