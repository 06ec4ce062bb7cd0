-- min_interval.lua: cooldown; no two operations on a key closer than interval.
--
-- KEYS: key        string holding the last operation's time (us)
-- ARGV (per limit): period the interval, us; cost is 1
-- State: the string; TTL = the interval.
-- Returns: see prelude.lua. retry = last + interval - now.
local function min_interval_decide(key, now, interval)
  local raw, replace = read('GET', key)
  local last = tonumber(raw)
  local d = {algo = 'min_interval', key = key, now = now, interval = interval, taken = 1, replace = replace}
  if last and now < last + interval then
    d.ok = 0
    d.rem_now, d.rem_after = 0, 0
    d.retry = last + interval - now
    d.reset = last + interval
  else
    d.ok = 1
    d.rem_now, d.rem_after = 1, 0
    d.retry = 0
    d.reset = now + interval
  end
  d.wait = d.retry
  return d
end

local function min_interval_commit(d)
  redis.call('SET', d.key, us(d.now), 'PX', ttl_ms(d.interval))
end

-- Giving the operation back deletes it only if no later one replaced it: the
-- one before it was at least an interval before now, so none is pending.
local function min_interval_refund(key, now)
  if read('GET', key) == us(now) then redis.call('DEL', key) end
end
