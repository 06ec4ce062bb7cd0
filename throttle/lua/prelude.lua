-- prelude.lua: shared by every limiter script. Sluice composes one script from
-- prelude.lua, one file per algorithm, dispatch.lua and consume.lua (or
-- reserve.lua), so one EVALSHA checks and consumes any mix of limits
-- atomically.
--
-- Units: all times are integer microseconds since the Unix epoch ("us"). A
-- double holds them exactly (2^53 us is year 2255).
--
-- Every algorithm file defines <algo>_decide(...) -> d, which reads state and
-- writes nothing, <algo>_commit(d), which writes the consumption and sets the
-- TTL, and <algo>_refund(...), which gives back what a committed call took
-- (a cross-slot call whose later part was blocked). d has:
--   d.ok        1 if cost units fit now, else 0
--   d.rem_now   units available before this call
--   d.rem_after units left if this call is committed
--   d.reset     absolute us at which the limit is back to full capacity
--   d.retry     us to wait until cost units fit (0 when d.ok == 1): exact,
--               the earliest moment the limit could allow the cost
--   d.wait      us a blocked caller should wait (>= d.retry): d.retry except
--               for a fixed window, which spreads a crowd of waiters over the
--               next windows (see fixed_window.lua)
--   d.taken     units a commit takes (0 for a distinct member already counted)
--   d.replace   true when the key holds another algorithm's state (a limit
--               was reconfigured): the commit deletes it first

-- The library functions the parts call for every limit of every send, as
-- locals: an upvalue instead of a lookup in the globals (and in math's
-- table) at each call.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local tonumber, ipairs, pairs, type = tonumber, ipairs, pairs, type

-- ttl_ms turns a state lifetime in us into a PEXPIRE argument: rounded up,
-- plus one second so state outlives small clock differences between callers
-- that pass their own `now` (tests) and Redis' own expiry clock.
local function ttl_ms(us)
  if us < 0 then us = 0 end
  return ceil(us / 1000) + 1000
end

-- floor_units counts whole units in a span, forgiving float noise from
-- non-integer emission intervals (1s/3 = 333333.33us).
local function floor_units(span, interval)
  return floor(span / interval + 1e-9)
end

-- us renders a time for a Redis argument without an exponent.
local function us(t)
  return string.format('%d', t)
end

-- read runs a read command that fails with WRONGTYPE when the key holds
-- another algorithm's state; it returns the reply, or nil and true then.
local function read(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then return nil, true end
  return r, false
end

-- extend raises key's TTL to at least ms (keys shared by several limits keep
-- the longest lifetime any of them needs).
local function extend(key, ms)
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end

-- window_refund gives back cost units counted in the window of now in a
-- {w = window start, c = count} hash (fixed window, sliding window counter),
-- if that window is still the current one.
local function window_refund(key, now, period, cost)
  local start = now - math.fmod(now, period)
  local w = read('HGET', key, 'w')
  if w and tonumber(w) == start then redis.call('HINCRBY', key, 'c', -cost) end
end

-- clock returns the call's time in us: arg (a caller's clock, tests and
-- refunds), or Redis TIME when arg is "0", one clock for all workers.
local function clock(arg)
  local now = tonumber(arg)
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end
