-- prelude.lua: shared by every limiter script. Sluice composes one script from
-- prelude.lua, one file per algorithm (gcra.lua, fixed_window.lua,
-- concurrency.lua) and consume.lua, so one EVALSHA checks and consumes any mix
-- of limits atomically.
--
-- Units: all times are integer microseconds since the Unix epoch ("us"). A
-- double holds them exactly (2^53 us is year 2255).
--
-- Every algorithm file defines a function
--   decide(key, now, limit, period, burst, cost, lease_id) -> d
-- that reads state and writes nothing. d has:
--   d.ok        1 if cost units fit now, else 0
--   d.rem_now   units available before this call
--   d.rem_after units left if this call is committed
--   d.reset     absolute us at which the limit is back to full capacity
--   d.retry     us to wait until cost units fit (0 when d.ok == 1): exact,
--               the earliest moment the limit could allow the cost
--   d.commit    function() that writes the consumption and refreshes the TTL
--   d.wait      us a blocked caller should wait (>= d.retry): for most
--               algorithms d.retry; a fixed window spreads a crowd of waiters
--               over the next windows (see fixed_window.lua)
--   d.record    function() called in consume mode, for a blocked call, on
--               the limit that sets the call's wait: counts the caller among
--               that limit's waiters. It takes no units.

-- ttl_ms turns a state lifetime in us into a PEXPIRE argument: rounded up,
-- plus one second so state outlives small clock differences between callers
-- that pass their own `now` (tests) and Redis' own expiry clock.
local function ttl_ms(us)
  if us < 0 then us = 0 end
  return math.ceil(us / 1000) + 1000
end

-- floor_units counts whole units in a span, forgiving float noise from
-- non-integer emission intervals (1s/3 = 333333.33us).
local function floor_units(span, interval)
  return math.floor(span / interval + 1e-9)
end
