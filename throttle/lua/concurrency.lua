-- concurrency.lua: at most `limit` leases in flight.
--
-- KEYS: key        sorted set, member = lease id, score = lease expiry (us)
-- ARGV (per limit): limit    leases allowed at once
--                   period   lease lifetime, us
--                   cost     leases this call takes (members id, id#2, id#3 …)
-- The lease id is the call id.
-- State: the sorted set; expired members are leases of workers that died and
-- are reclaimed on the next commit (and by the cleanup job). TTL = the
-- latest expiry.
-- Returns: see prelude.lua. reset = when the last held lease expires (full
-- capacity again). retry = time until the oldest lease expires, the
-- latest moment a slot is certain to free up (leases are usually released
-- much sooner; callers may cap it).
local function concurrency_decide(key, now, limit, lease, cost)
  local held, replace = read('ZCOUNT', key, '(' .. us(now), '+inf')
  held = held or 0
  local d = {algo = 'concurrency', key = key, now = now, lease = lease, cost = cost, taken = cost, replace = replace}
  d.rem_now = max(0, limit - held)
  -- Full capacity again when the last held lease expires.
  local latest = now
  if held > 0 then latest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
  d.reset = latest
  if held + cost <= limit then
    d.ok = 1
    d.retry = 0
    d.rem_after = limit - held - cost
    d.reset_after = max(latest, now + lease)
  else
    d.ok = 0
    d.rem_after = d.rem_now
    local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. us(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    local expiry = tonumber(oldest[2]) or now
    d.retry = max(0, ceil(expiry - now))
  end
  d.wait = d.retry
  return d
end

local function lease_member(call_id, i)
  if i == 1 then return call_id end
  return call_id .. '#' .. i
end

local function concurrency_commit(d, call_id)
  if d.replace then redis.call('DEL', d.key) end
  local expiry = us(d.now + d.lease)
  redis.call('ZREMRANGEBYSCORE', d.key, '-inf', us(d.now))
  for i = 1, d.cost do redis.call('ZADD', d.key, expiry, lease_member(call_id, i)) end
  local last = redis.call('ZRANGE', d.key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', d.key, ttl_ms((tonumber(last[2]) or d.now) - d.now))
end

local function concurrency_refund(key, cost, call_id)
  for i = 1, cost do redis.call('ZREM', key, lease_member(call_id, i)) end
end
