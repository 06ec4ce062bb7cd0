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
-- Boundary: the count starts over at every window start, so up to 2 x limit
-- units can pass within one period that spans a boundary.
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
  local v, replace = read('HMGET', key, 'w', 'c', 'bw', 'b')
  v = v or {}
  local w, c, bw, b = v[1], v[2], v[3], v[4]
  local current = w and tonumber(w) == start
  local used = 0
  if current then used = tonumber(c) or 0 end
  local d = {algo = 'fixed_window', key = key, now = now, start = start, stop = stop,
             cost = cost, taken = cost, current = current, replace = replace}
  d.rem_now = max(0, limit - used)
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
  d.waiting = 0
  if bw and tonumber(bw) == start then d.waiting = tonumber(b) or 0 end
  d.wait = d.retry
  if d.ok == 0 then
    d.wait = d.retry + floor(d.waiting / limit) * period
  end
  return d
end

local function fixed_window_commit(d)
  if d.replace then redis.call('DEL', d.key) end
  if d.current and not d.replace then
    -- The TTL was set to this window's end when the window opened.
    redis.call('HINCRBY', d.key, 'c', d.cost)
  else
    redis.call('HSET', d.key, 'w', us(d.start), 'c', d.cost)
    redis.call('PEXPIRE', d.key, ttl_ms(d.stop - d.now))
  end
end

-- fixed_window_record counts a blocked caller among the window's waiters.
local function fixed_window_record(d)
  if d.replace then redis.call('DEL', d.key) end
  redis.call('HSET', d.key, 'bw', us(d.start), 'b', d.waiting + d.cost)
  if not d.current or d.replace then redis.call('PEXPIRE', d.key, ttl_ms(d.stop - d.now)) end
end
