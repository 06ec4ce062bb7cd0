-- sliding_window_log.lua: exact sliding window, one entry per admitted unit.
--
-- KEYS: key        sorted set, member = '<call id>:<i>' (unique per unit, even
--                  within one microsecond), score = admission time (us)
-- ARGV (per limit): limit  units per window
--                   period window length, us
--                   cost   units this call takes
-- An entry admitted at s counts while now < s + period. State: the set;
-- entries that left the window are trimmed on every commit; TTL = the newest
-- entry's exit.
-- Returns: see prelude.lua. retry = until the oldest entries leave the
-- window: the (used + cost - limit)-th oldest live entry's exit.
local function sliding_window_log_decide(key, now, limit, period, cost)
  local lo = '(' .. us(now - period)
  local used, replace = read('ZCOUNT', key, lo, '+inf')
  used = used or 0
  local d = {algo = 'sliding_window_log', key = key, now = now, period = period,
             cost = cost, taken = cost, replace = replace}
  d.rem_now = max(0, limit - used)
  local newest = now
  if used > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  if used + cost <= limit then
    d.ok = 1
    d.retry = 0
    d.rem_after = limit - used - cost
    d.reset = now + period
  else
    d.ok = 0
    d.rem_after = d.rem_now
    local k = used + cost - limit
    local e = redis.call('ZRANGEBYSCORE', key, lo, '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
    d.retry = max(0, tonumber(e[2]) + period - now)
    d.reset = newest + period
  end
  d.wait = d.retry
  return d
end

local function sliding_window_log_commit(d, call_id)
  if d.replace then redis.call('DEL', d.key) end
  redis.call('ZREMRANGEBYSCORE', d.key, '-inf', us(d.now - d.period))
  local args = {}
  for i = 1, d.cost do
    args[#args + 1] = us(d.now)
    args[#args + 1] = call_id .. ':' .. i
  end
  if #args > 0 then redis.call('ZADD', d.key, unpack(args)) end
  redis.call('PEXPIRE', d.key, ttl_ms(d.period))
end

local function sliding_window_log_refund(key, cost, call_id)
  for i = 1, cost do redis.call('ZREM', key, call_id .. ':' .. i) end
end
