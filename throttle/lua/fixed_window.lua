-- fixed_window.lua: counter per window, windows aligned to multiples of the
-- period since the Unix epoch (a 1d window starts at 00:00 UTC).
--
-- KEYS: key        hash {w = window start us, c = units used in it,
--                         bw = window of the waiter count, b = units of
--                         blocked callers counted in window bw}
-- ARGV (per limit): limit  units per window
--                   period window length, us
--                   cost   units this call takes
-- State: the hash; TTL = end of the window. A hash from an older window counts
-- as empty, so a caller-supplied clock never sees stale counts.
-- Returns: see prelude.lua. retry = time to the next window start. wait
-- spreads a crowd: the j-th unit blocked during a window (j from 0) is sent
-- to the window floor(j / limit) after the next one, so W waiters come back
-- about `limit` per window instead of all W in every window. It is a
-- schedule, not a reservation: a window's units go to whoever asks first,
-- and the count c alone decides. Places are counted afresh in every window,
-- relative to it, so a caller that came back late or was blocked again
-- never leaves a stale place that pushes later callers further out.
local function fixed_window_decide(key, now, limit, period, cost)
  local start = now - math.fmod(now, period)
  local stop = start + period
  local w, c, bw, b = unpack(redis.call('HMGET', key, 'w', 'c', 'bw', 'b'))
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
  local waiting = 0
  if bw and tonumber(bw) == start then waiting = tonumber(b) or 0 end
  d.wait = d.retry
  if d.ok == 0 then
    d.wait = d.retry + math.floor(waiting / limit) * period
  end
  local current = w and tonumber(w) == start
  d.commit = function()
    if current then
      -- The TTL was set to this window's end when the window opened.
      redis.call('HINCRBY', key, 'c', cost)
    else
      redis.call('HSET', key, 'w', string.format('%d', start), 'c', cost)
      redis.call('PEXPIRE', key, ttl_ms(stop - now))
    end
  end
  d.record = function()
    redis.call('HSET', key, 'bw', string.format('%d', start), 'b', waiting + cost)
    if not current then redis.call('PEXPIRE', key, ttl_ms(stop - now)) end
  end
  return d
end
