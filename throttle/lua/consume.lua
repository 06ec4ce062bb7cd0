-- consume.lua: check, and in "consume" mode take, several limits at once,
-- all or nothing.
--
-- KEYS[i]: the state key of limit i (all keys share one {hash tag}).
-- ARGV[1]: now, us since the epoch; "0" = use Redis TIME (one clock for all workers)
-- ARGV[2]: mode: "consume" takes the cost from every limit only if all allow;
--          "check" takes nothing
-- ARGV[3]: lease id for concurrency limits
-- ARGV[4 + 5*(i-1) ...]: limit i as: algorithm ("gcra" | "fixed_window" |
--          "concurrency"), limit, period us (lease us for concurrency),
--          burst, cost
-- Returns: {now_us, allowed (1|0: every limit had room; in consume mode
--           the cost was then taken), then per limit i:
--           ok (1|0), remaining, reset (us since epoch), retry_after (us),
--           wait (us, >= retry_after: when a blocked caller should come
--           back, see prelude.lua)}
-- remaining is after the call when committed, else what is available now.
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local mode = ARGV[2]
local lease_id = ARGV[3]
local n = #KEYS
if #ARGV ~= 3 + 5 * n then
  return redis.error_reply('sluice: want ' .. (3 + 5 * n) .. ' ARGV for ' .. n .. ' keys, got ' .. #ARGV)
end

local decisions = {}
local all_ok = 1
for i = 1, n do
  local a = 3 + 5 * (i - 1)
  local algo = ARGV[a + 1]
  local limit = tonumber(ARGV[a + 2])
  local period = tonumber(ARGV[a + 3])
  local burst = tonumber(ARGV[a + 4])
  local cost = tonumber(ARGV[a + 5])
  local d
  if algo == 'gcra' then
    d = gcra_decide(KEYS[i], now, limit, period, burst, cost)
  elseif algo == 'fixed_window' then
    d = fixed_window_decide(KEYS[i], now, limit, period, cost)
  elseif algo == 'concurrency' then
    d = concurrency_decide(KEYS[i], now, limit, period, cost, lease_id)
  else
    return redis.error_reply('sluice: unknown algorithm ' .. tostring(algo))
  end
  if d.ok == 0 then all_ok = 0 end
  decisions[i] = d
end

local committed = 0
if mode == 'consume' and all_ok == 1 then
  for i = 1, n do decisions[i].commit() end
  committed = 1
end
-- A blocked caller waits for its slowest limit; only that limit counts it
-- as a waiter, so the others do not hold a place it will not use.
if mode == 'consume' and all_ok == 0 then
  local longest = 0
  for i = 1, n do
    if decisions[i].ok == 0 and decisions[i].wait > longest then longest = decisions[i].wait end
  end
  for i = 1, n do
    local d = decisions[i]
    if d.ok == 0 and d.wait == longest then d.record() end
  end
end

local out = {now, all_ok}
for i = 1, n do
  local d = decisions[i]
  local rem = d.rem_now
  if committed == 1 then rem = d.rem_after end
  out[#out + 1] = d.ok
  out[#out + 1] = rem
  out[#out + 1] = d.reset
  out[#out + 1] = d.retry
  out[#out + 1] = math.ceil(d.wait)
end
return out
