-- fixed_window.lua: counter per window, windows aligned to multiples of the
-- period since the Unix epoch (a 1d window starts at 00:00 UTC).
--
-- KEYS: key        hash {w = window start us, c = units used in it}
-- ARGV (per limit): limit  units per window
--                   period window length, us
--                   cost   units this call takes
-- State: the hash; TTL = end of the window. A hash from an older window counts
-- as empty, so a caller-supplied clock never sees stale counts.
-- Returns: see prelude.lua. retry = time to the next window start.
local function fixed_window_decide(key, now, limit, period, cost)
  local start = now - math.fmod(now, period)
  local stop = start + period
  local w, c = unpack(redis.call('HMGET', key, 'w', 'c'))
  local used = 0
  if w and tonumber(w) == start then used = tonumber(c) or 0 end
  local d = {}
  d.rem_now = math.max(0, limit - used)
  d.reset = stop
  if used + cost <= limit then
    d.ok = 1
    d.retry = 0
    d.rem_after = limit - used - cost
  else
    d.ok = 0
    d.retry = stop - now
    d.rem_after = d.rem_now
  end
  d.commit = function()
    redis.call('HSET', key, 'w', string.format('%d', start), 'c', used + cost)
    redis.call('PEXPIRE', key, ttl_ms(stop - now))
  end
  return d
end
