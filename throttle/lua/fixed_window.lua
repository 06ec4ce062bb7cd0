-- fixed_window.lua: counter per window, windows aligned to multiples of the
-- period since the Unix epoch (a 1d window starts at 00:00 UTC).
--
-- KEYS: key        hash {w = window start us, c = units used in it,
--                         qw = window the last waiter was sent to, qn = units
--                         of waiters sent to qw}
-- ARGV (per limit): limit  units per window
--                   period window length, us
--                   cost   units this call takes
-- State: the hash; TTL = end of the window. A hash from an older window counts
-- as empty, so a caller-supplied clock never sees stale counts.
-- Returns: see prelude.lua. retry = time to the next window start. wait
-- lines blocked callers up: the first `limit` units of waiters are sent to
-- the next window, the next `limit` to the one after, and so on, so a backlog
-- of W waiters is retried about once each instead of W times per window. It
-- is a schedule, not a reservation: a window's units still go to whoever
-- asks first, and the count c alone decides.
local function fixed_window_decide(key, now, limit, period, cost)
  local start = now - math.fmod(now, period)
  local stop = start + period
  local w, c, qw, qn = unpack(redis.call('HMGET', key, 'w', 'c', 'qw', 'qn'))
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
  local tail = tonumber(qw)
  local tail_used = tonumber(qn) or 0
  if not tail or tail < stop then
    tail = stop
    tail_used = 0
  end
  local expires = math.max(stop, tail + period)
  d.commit = function()
    redis.call('HSET', key, 'w', string.format('%d', start), 'c', used + cost)
    redis.call('PEXPIRE', key, ttl_ms(expires - now))
  end
  d.wait = function()
    if tail_used + cost > limit then
      tail = tail + period
      tail_used = 0
    end
    redis.call('HSET', key, 'qw', string.format('%d', tail), 'qn', tail_used + cost)
    redis.call('PEXPIRE', key, ttl_ms(math.max(stop, tail + period) - now))
    return tail - now
  end
  return d
end
