-- cleanup.lua: maintenance of one limiter key, run by the cleanup cron job.
--
-- KEYS[1]: a limiter key
-- ARGV: none
-- Reclaims expired concurrency leases (members whose expiry, in us, is past
-- Redis TIME) and deletes state that has no TTL: every limiter write sets
-- one, so a key without it was left by something else (an older version, a
-- manual write) and would live forever.
-- Returns: {leases reclaimed, 1 if the key was deleted else 0}
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local reclaimed = 0
if redis.call('TYPE', key).ok == 'zset' then
  reclaimed = redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
end
if redis.call('PTTL', key) == -1 then
  redis.call('DEL', key)
  return {reclaimed, 1}
end
return {reclaimed, 0}
