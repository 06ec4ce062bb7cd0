-- concurrency.lua: at most `limit` leases in flight.
--
-- KEYS: key        sorted set, member = lease id, score = lease expiry (us)
-- ARGV (per limit): limit    leases allowed at once
--                   lease    lease lifetime, us
--                   cost     leases this call takes (members id, id#2, id#3 …)
--                   lease_id unique per call
-- State: the sorted set; expired members are leases of workers that died and
-- are reclaimed on the next commit (and by the cleanup job). TTL = the
-- latest expiry.
-- Returns: see prelude.lua. retry = time until the oldest lease expires, the
-- latest moment a slot is certain to free up (leases are usually released
-- much sooner; callers may cap it).
local function concurrency_decide(key, now, limit, lease, cost, lease_id)
  local held = redis.call('ZCOUNT', key, '(' .. string.format('%d', now), '+inf')
  local d = {}
  d.rem_now = math.max(0, limit - held)
  if held + cost <= limit then
    d.ok = 1
    d.retry = 0
    d.rem_after = limit - held - cost
    d.reset = now
  else
    d.ok = 0
    d.rem_after = d.rem_now
    local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. string.format('%d', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local expiry = tonumber(oldest[2]) or now
    d.retry = math.max(0, math.ceil(expiry - now))
    d.reset = math.ceil(expiry)
  end
  d.commit = function()
    local expiry = string.format('%d', now + lease)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
    for i = 1, cost do
      local member = lease_id
      if i > 1 then member = lease_id .. '#' .. i end
      redis.call('ZADD', key, expiry, member)
    end
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', key, ttl_ms((tonumber(last[2]) or now) - now))
  end
  d.wait = d.retry
  d.record = function() end
  return d
end
