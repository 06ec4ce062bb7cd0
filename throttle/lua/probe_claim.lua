-- probe_claim.lua: gives the caller the next turn to probe (Redis.ClaimProbe).
--
-- KEYS[1] the probe record  KEYS[2] its lock
-- ARGV[1] most interval ms
-- Returns false when there is no record, {} when another turn still runs,
-- else {n (this probe's number), interval ms until the next turn, fields,
-- code}. The interval is the record's first interval doubled for each
-- probe made, up to ARGV[1].
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('EXISTS', KEYS[2]) == 1 then return {} end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local v = redis.call('HMGET', KEYS[1], 'fields', 'code', 'first')
local first = tonumber(v[3]) or tonumber(ARGV[1])
local every = math.floor(math.min(tonumber(ARGV[1]), first * 2 ^ n))
redis.call('SET', KEYS[2], '1', 'PX', every)
return {n, every, v[1] or '{}', v[2] or '0'}
