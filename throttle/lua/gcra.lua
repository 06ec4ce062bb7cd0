-- gcra.lua: token bucket as the generic cell rate algorithm (GCRA).
--
-- KEYS: key        string holding the theoretical arrival time (TAT, us)
-- ARGV (per limit): limit  units per period (> 0)
--                   period us
--                   burst  bucket size in units (>= 1); 1 spaces units evenly
--                   cost   units this call takes (>= 0)
-- State: one string, the TAT; TTL = time until the bucket is full again.
-- Returns: see prelude.lua. retry is exact: the earliest time cost units fit.
local function gcra_decide(key, now, limit, period, burst, cost)
  local interval = period / limit          -- emission interval T
  local tolerance = interval * burst       -- bucket depth in us
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  local allow_at = new_tat - tolerance
  local d = {}
  d.rem_now = math.max(0, floor_units(now - tat + tolerance, interval))
  if now >= allow_at then
    d.ok = 1
    d.retry = 0
    d.rem_after = math.max(0, floor_units(now - new_tat + tolerance, interval))
    d.reset = math.ceil(new_tat)
  else
    d.ok = 0
    d.retry = math.ceil(allow_at - now)
    d.rem_after = d.rem_now
    d.reset = math.ceil(tat)
  end
  d.commit = function()
    local stored = math.ceil(new_tat) -- rounding up never over-admits
    redis.call('SET', key, string.format('%d', stored), 'PX', ttl_ms(stored - now))
  end
  d.wait = d.retry
  d.record = function() end
  return d
end
