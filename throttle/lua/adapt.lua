-- adapt.lua: writes one key's adaptive state (Redis.AdaptDown, AdaptUp,
-- ResetAdaptation) if nobody changed it since the caller read it: a
-- compare-and-set, so the caller computes the change (adaptive.go) and
-- concurrent workers never apply two decreases on one reading.
--
-- KEYS[1] the adaptive hash: field = limiter key, value = "<version> <json>";
--         field '_v' counts the hash's changes (the caches re-read the hash
--         only when it moved)
-- ARGV[1] the field (a limiter key)
-- ARGV[2] the version the caller read (0: the field was absent)
-- ARGV[3] the new JSON, or '' to delete the field
-- ARGV[4] the hash's lifetime, ms, at least (PEXPIRE when longer than now)
-- Returns {1, new version} when written, {0, current version} when the
-- field moved since the caller's reading (read it again).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local v = 0
if cur then v = tonumber(string.match(cur, '^(%d+) ')) or 0 end
if v ~= tonumber(ARGV[2]) then return {0, v} end
if ARGV[3] == '' then
  if not cur then return {1, 0} end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', v + 1) .. ' ' .. ARGV[3])
end
redis.call('HINCRBY', KEYS[1], '_v', 1)
local ttl = tonumber(ARGV[4])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {1, v + 1}
