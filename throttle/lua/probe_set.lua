-- probe_set.lua: records that a pause ends only when a probe succeeds
-- (Redis.SetProbe).
--
-- KEYS[1] the probe record (hash: fields, code, first, n)
-- KEYS[2] its lock (string; while it lives no process may probe)
-- ARGV[1] fields (JSON)   ARGV[2] code   ARGV[3] first interval ms
-- ARGV[4] record TTL ms
-- A new record also takes the lock for the first interval, so the first
-- probe comes that long after the refusal; a record already there keeps
-- its count of probes and its lock.
local new = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSET', KEYS[1], 'fields', ARGV[1], 'code', ARGV[2], 'first', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if new then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3], 'NX')
end
return new and 1 or 0
