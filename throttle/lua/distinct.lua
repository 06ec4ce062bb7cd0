-- distinct.lua: at most `limit` distinct members in any window of `period`
-- (WhatsApp messaging tiers: unique users per rolling 24 h).
--
-- KEYS: key        sorted set, member = the subject (a recipient), score =
--                  the last time it was admitted (us)
-- ARGV (per limit): limit  distinct members per window
--                   period window length, us
--                   member the subject of this call
-- A member admitted at s counts while now < s + period; a member that still
-- counts passes free (taken 0) and its time is refreshed. State: the set,
-- trimmed on every commit; TTL = the window.
-- Returns: see prelude.lua. retry = until the oldest member leaves the window.
local function distinct_decide(key, now, limit, period, member)
  local lo = now - period
  local score, replace = read('ZSCORE', key, member)
  local used = 0
  if not replace then used = redis.call('ZCOUNT', key, '(' .. us(lo), '+inf') end
  local d = {algo = 'distinct', key = key, now = now, period = period, member = member, replace = replace}
  d.rem_now = max(0, limit - used)
  score = tonumber(score)
  if score and score > lo then
    d.ok, d.retry, d.taken = 1, 0, 0
    d.rem_after = d.rem_now
    d.reset = now + period
  elseif used + 1 <= limit then
    d.ok, d.retry, d.taken = 1, 0, 1
    d.rem_after = limit - used - 1
    d.reset = now + period
  else
    d.ok, d.taken = 0, 0
    d.rem_after = d.rem_now
    local k = used + 1 - limit
    local e = redis.call('ZRANGEBYSCORE', key, '(' .. us(lo), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
    d.retry = max(0, tonumber(e[2]) + period - now)
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    d.reset = tonumber(newest[2]) + period
  end
  d.wait = d.retry
  return d
end

local function distinct_commit(d)
  if d.replace then redis.call('DEL', d.key) end
  redis.call('ZREMRANGEBYSCORE', d.key, '-inf', us(d.now - d.period))
  redis.call('ZADD', d.key, us(d.now), d.member)
  redis.call('PEXPIRE', d.key, ttl_ms(d.period))
end

-- Only a member this call added is given back (taken 1); one that was
-- already counted stays.
local function distinct_refund(key, now, member, taken)
  if taken > 0 and tonumber((read('ZSCORE', key, member))) == now then redis.call('ZREM', key, member) end
end
