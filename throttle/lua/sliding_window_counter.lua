-- sliding_window_counter.lua: the sliding window approximated by two fixed
-- windows, the previous one weighted by how much of it the sliding window
-- still covers.
--
-- KEYS: key        hash {w = current window start us, c = its count,
--                         p = the previous window's count}
-- ARGV (per limit): limit  units per window
--                   period window length, us
--                   cost   units this call takes
-- used(now) = p * (period - (now - w)) / period + c. A call is allowed when
-- used + cost <= limit; denied calls are not counted. State: the hash, which
-- lives until the end of the window after its own (it is that window's
-- "previous"), i.e. at least two windows.
-- Returns: see prelude.lua. retry is exact for the current state: the first
-- time at which the weighted previous count has decayed enough, within this
-- window or the next (where this window's count becomes the previous one).
local function sliding_window_counter_decide(key, now, limit, period, cost)
  local start = now - math.fmod(now, period)
  local v, replace = read('HMGET', key, 'w', 'c', 'p')
  v = v or {}
  local w = tonumber(v[1])
  local cur, prev = 0, 0
  if w == start then
    cur, prev = tonumber(v[2]) or 0, tonumber(v[3]) or 0
  elseif w == start - period then
    prev = tonumber(v[2]) or 0
  end
  local weighted = prev * (period - (now - start)) / period
  local d = {algo = 'sliding_window_counter', key = key, now = now, start = start, period = period,
             cost = cost, taken = cost, current = (w == start), cur = cur, prev = prev, replace = replace}
  d.rem_now = max(0, floor(limit - weighted - cur + 1e-9))
  if weighted + cur + cost <= limit + 1e-9 then
    d.ok = 1
    d.retry = 0
    d.rem_after = max(0, floor(limit - weighted - cur - cost + 1e-9))
    d.reset = start + 2 * period
  else
    d.ok = 0
    d.rem_after = d.rem_now
    local at
    local room = limit - cur - cost
    if room >= 0 and prev > 0 then
      -- prev * (period - e) / period <= room  <=>  e >= period - room * period / prev
      local e = ceil(period - room * period / prev - 1e-9)
      if e < period then at = start + e end
    end
    if not at then
      local e = 0
      if cur > 0 then e = max(0, ceil(period - (limit - cost) * period / cur - 1e-9)) end
      at = start + period + e
    end
    d.retry = max(0, at - now)
    if cur > 0 then d.reset = start + 2 * period elseif prev > 0 then d.reset = start + period else d.reset = now end
  end
  d.wait = d.retry
  return d
end

local function sliding_window_counter_commit(d)
  if d.replace then redis.call('DEL', d.key) end
  if d.current and not d.replace then
    redis.call('HINCRBY', d.key, 'c', d.cost)
  else
    redis.call('HSET', d.key, 'w', us(d.start), 'c', d.cost, 'p', d.prev)
    redis.call('PEXPIRE', d.key, ttl_ms(d.start + 2 * d.period - d.now))
  end
end
