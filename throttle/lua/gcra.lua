-- gcra.lua: token bucket as the generic cell rate algorithm (GCRA), the same
-- decisions as go-redis/redis_rate.
--
-- KEYS: key     string holding the theoretical arrival time (TAT, us), or,
--               when field ~= '', a hash with one TAT per limit name (several
--               GCRA limits of one subject share one key)
-- ARGV (per limit): limit  units per period (> 0)
--                   period us
--                   burst  bucket size in units (>= 1); 1 spaces units evenly
--                   cost   units this call takes (>= 0)
--                   field  '' or the limit's name in the shared hash
-- State: the TAT; TTL = time until the bucket is full again.
-- Returns: see prelude.lua. retry is exact: the earliest time cost units fit.
-- reset is when the bucket is full again: after this call if it is
-- committed, else as it stands. The TAT is stored rounded up to a whole us,
-- so with an interval that is not a whole number of us (3/s) calls at the
-- very same microsecond may find up to 1 us less room: it never over-admits.
local function gcra_decide(key, field, now, limit, period, burst, cost)
  local interval = period / limit          -- emission interval T
  local tolerance = interval * burst       -- bucket depth in us
  local raw, replace
  if field == '' then raw, replace = read('GET', key) else raw, replace = read('HGET', key, field) end
  -- Work relative to now: TAT - now is a small exact integer, where the
  -- absolute TAT (~1.8e15 us) would leave a double only 1/4 us of precision.
  local ahead = (tonumber(raw) or now) - now
  if ahead < 0 then ahead = 0 end
  local new_ahead = ahead + interval * cost
  local d = {algo = 'gcra', key = key, field = field, now = now, new_ahead = new_ahead, taken = cost, replace = replace}
  d.rem_now = max(0, floor_units(tolerance - ahead, interval))
  d.reset_now = now + ahead
  if new_ahead <= tolerance then
    d.ok = 1
    d.retry = 0
    d.rem_after = max(0, floor_units(tolerance - new_ahead, interval))
    d.reset_after = now + ceil(new_ahead)
  else
    d.ok = 0
    d.retry = ceil(new_ahead - tolerance)
    d.rem_after = d.rem_now
    d.reset_after = d.reset_now
  end
  d.reset = d.reset_now
  d.wait = d.retry
  return d
end

-- gcra_store writes the TAT now + new_ahead (gcra_commit's write, for
-- callers that have no decision table).
local function gcra_store(key, field, now, replace, new_ahead)
  local stored = now + ceil(new_ahead) -- rounding up never over-admits
  if replace then redis.call('DEL', key) end
  if field == '' then
    redis.call('SET', key, us(stored), 'PX', ttl_ms(stored - now))
  else
    redis.call('HSET', key, field, us(stored))
    extend(key, ttl_ms(stored - now))
  end
end

local function gcra_commit(d)
  gcra_store(d.key, d.field, d.now, d.replace, d.new_ahead)
end

local function gcra_refund(key, field, now, limit, period, cost)
  local raw
  if field == '' then raw = read('GET', key) else raw = read('HGET', key, field) end
  local tat = tonumber(raw)
  if not tat then return end
  local back = ceil(tat - (period / limit) * cost)
  if field == '' then
    if back <= now then redis.call('DEL', key) else redis.call('SET', key, us(back), 'KEEPTTL') end
  else
    if back <= now then redis.call('HDEL', key, field) else redis.call('HSET', key, field, us(back)) end
  end
end
